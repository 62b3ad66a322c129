//! A SHA-256 whose running state can be saved between the calls of a
//! stream (the kernel carries it in the call state): the eight chaining
//! words, the bytes of the unfinished 64-byte block and the length so far.
//! Blocks are compressed by `sha2`'s own `compress256`; only FIPS 180-4's
//! final padding is done here. The digest equals `Sha256::digest` of all the
//! bytes given, whatever the pieces (tests check it).

use serde::{Deserialize, Serialize};
use sha2::digest::consts::U64;
// sha2 0.10's `compress256` takes its blocks as generic-array 0.14 arrays,
// which that crate's last release marks deprecated in favour of 1.x.
#[allow(deprecated)]
use sha2::digest::generic_array::GenericArray;

/// FIPS 180-4 §5.3.3: the initial hash value of SHA-256.
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// A SHA-256 in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningSha256 {
    /// The chaining words after the last whole block.
    h: [u32; 8],
    /// The bytes after the last whole block (fewer than 64).
    pending: Vec<u8>,
    /// Bytes given so far.
    len: u64,
}

impl Default for RunningSha256 {
    fn default() -> Self {
        RunningSha256 {
            h: H0,
            pending: Vec::new(),
            len: 0,
        }
    }
}

#[allow(deprecated)]
fn compress(h: &mut [u32; 8], bytes: &[u8]) {
    let blocks: Vec<GenericArray<u8, U64>> = bytes.chunks_exact(64).map(GenericArray::clone_from_slice).collect();
    sha2::compress256(h, &blocks);
}

impl RunningSha256 {
    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.len += data.len() as u64;
        self.pending.extend_from_slice(data);
        let whole = self.pending.len() / 64 * 64;
        compress(&mut self.h, &self.pending[..whole]);
        self.pending.drain(..whole);
    }

    /// Bytes given so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing was given.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The digest of everything given, hex.
    pub fn finish_hex(&self) -> String {
        let mut h = self.h;
        let mut tail = self.pending.clone();
        tail.push(0x80);
        while tail.len() % 64 != 56 {
            tail.push(0);
        }
        tail.extend_from_slice(&self.len.wrapping_mul(8).to_be_bytes());
        compress(&mut h, &tail);
        let bytes: Vec<u8> = h.iter().flat_map(|w| w.to_be_bytes()).collect();
        hex::encode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn equals_sha256_of_the_whole_whatever_the_pieces() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        for total in [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000] {
            let whole = hex::encode(Sha256::digest(&data[..total]));
            for piece in [1, 7, 63, 64, 65, 200, 1000] {
                let mut s = RunningSha256::default();
                for chunk in data[..total].chunks(piece) {
                    // Saved and restored between pieces, as between calls.
                    let saved = serde_json::to_string(&s).unwrap();
                    s = serde_json::from_str(&saved).unwrap();
                    s.update(chunk);
                }
                assert_eq!(s.finish_hex(), whole, "{total} bytes in pieces of {piece}");
                assert_eq!(s.len(), total as u64);
            }
        }
        assert_eq!(
            RunningSha256::default().finish_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
