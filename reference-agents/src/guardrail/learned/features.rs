//! The learned detector's features: hashed n-grams of the folded text.
//!
//! Four kinds, each hashed into one of [`BUCKETS`] weights:
//! * word unigrams and bigrams (a word is a run of letters, digits and `'`);
//! * character 3-grams and 5-grams of the text, with every run of
//!   whitespace read as one space (punctuation stays: `<|im_start|>`,
//!   `[INST]` and `###` are signals).
//!
//! The hashes are fixed here (FNV-1a for words, a multiplicative hash for
//! packed characters), not taken from a crate whose output may change
//! between versions: the committed weights are only valid for exactly these
//! functions. Only the first [`MAX_BYTES`] bytes of the folded text count,
//! which bounds the cost per text.

use crate::normalize::{is_word_byte, runs};

/// log2 of the number of weights.
pub const BUCKET_BITS: u32 = 17;
/// The number of weights.
pub const BUCKETS: usize = 1 << BUCKET_BITS;
/// Bytes of folded text that are read.
pub const MAX_BYTES: usize = 32 * 1024;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Distinguishes the kinds of feature that hash alike.
const SEED_WORD: u64 = 1;
const SEED_BIGRAM: u64 = 2;
const SEED_CHAR3: u64 = 3;
const SEED_CHAR5: u64 = 5;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The bucket of a 64-bit feature hash (Fibonacci hashing: the top bits of
/// a multiplication by 2^64 / φ).
fn bucket(h: u64, seed: u64) -> u32 {
    ((h ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BUCKET_BITS)) as u32
}

/// Calls `each` with the bucket of every feature of `folded` (with
/// repeats: a feature seen twice is given twice), and returns how many.
pub fn for_each(folded: &str, mut each: impl FnMut(u32)) -> u32 {
    let bytes = &folded.as_bytes()[..folded.len().min(MAX_BYTES)];
    let mut n = 0u32;
    // Words and word pairs.
    let mut prev: Option<u64> = None;
    for word in runs(bytes, is_word_byte) {
        let h = fnv(FNV_OFFSET, &bytes[word]);
        each(bucket(h, SEED_WORD));
        n += 1;
        if let Some(p) = prev {
            each(bucket(p.rotate_left(17) ^ h, SEED_BIGRAM));
            n += 1;
        }
        prev = Some(h);
    }
    // Character 3- and 5-grams over the text, whitespace runs as one space.
    let mut window = 0u64;
    let mut filled = 0u32;
    let mut last_space = true;
    for &b in bytes {
        let b = if b.is_ascii_whitespace() { b' ' } else { b };
        if b == b' ' && last_space {
            continue;
        }
        last_space = b == b' ';
        window = (window << 8) | u64::from(b);
        filled += 1;
        if filled >= 3 {
            each(bucket(window & 0xff_ffff, SEED_CHAR3));
            n += 1;
        }
        if filled >= 5 {
            each(bucket(window & 0xff_ffff_ffff, SEED_CHAR5));
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(text: &str) -> Vec<u32> {
        let mut v = Vec::new();
        let n = for_each(text, |b| v.push(b));
        assert_eq!(n as usize, v.len());
        v
    }

    #[test]
    fn counts_words_pairs_and_character_grams() {
        // 3 words, 2 pairs; "ab cd ef" is 8 characters: 6 3-grams, 4 5-grams.
        assert_eq!(buckets("ab cd ef").len(), 3 + 2 + 6 + 4);
        assert!(buckets("").is_empty());
        assert!(buckets("ab cd ef").iter().all(|b| (*b as usize) < BUCKETS));
    }

    #[test]
    fn whitespace_runs_read_as_one_space() {
        assert_eq!(buckets("ignore  all\n\n previous"), buckets("ignore all previous"));
        assert_ne!(buckets("ignore all previous"), buckets("ignore all-previous"));
    }

    #[test]
    fn the_hashes_are_the_ones_the_weights_were_trained_with() {
        // Pinned: changing a hash or a seed invalidates the committed model.
        assert_eq!(
            buckets("ignore previous"),
            [
                114944, 37375, 76984, 29628, 9948, 14429, 75965, 15508, 14228, 80159, 67720, 128123, 62933, 28039,
                85335, 84257, 103168, 74579, 81990, 70024, 91358, 77817, 91528, 83023, 38641, 50114, 51493
            ]
        );
    }

    #[test]
    fn reads_at_most_max_bytes() {
        let long = "word ".repeat(MAX_BYTES);
        let n = for_each(&long, |_| {});
        assert!(n as usize <= 4 * MAX_BYTES, "{n}");
    }
}
