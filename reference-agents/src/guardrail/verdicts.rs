//! Tool definitions' verdicts, remembered.
//!
//! An agent declares the same tools in every model call, and each session
//! of an MCP client lists the same servers' tools: scoring a definition
//! costs several microseconds ([`poisoning::score_tool`](super::poisoning::score_tool)),
//! looking its verdict up far less. A verdict is kept under the SHA-256 of
//! everything it was scored from (the tool's name, its description, the
//! texts the scorer reads, and the family weights), so a tool whose
//! definition changed in any byte, or a policy with other weights, is
//! scored anew; a collision cannot be crafted to pass one tool as another.
//!
//! The cache is bounded: at most [`CAPACITY`] verdicts, the least recently
//! used out first, and a verdict whose tool name is longer than
//! [`NAME_BYTES`] is not kept, so a flood of new or huge declarations
//! cannot grow the agent. Its lock is held for one lookup or insertion.

use std::num::NonZeroUsize;
use std::sync::{Arc, LazyLock, Mutex};

use lru::LruCache;
use sha2::{Digest, Sha256};

use super::detector::Weights;
use super::poisoning::ToolVerdict;

/// How many verdicts are kept.
const CAPACITY: NonZeroUsize = NonZeroUsize::new(16_384).expect("non-zero");

/// The longest tool name whose verdict is kept.
const NAME_BYTES: usize = 256;

static VERDICTS: LazyLock<Mutex<LruCache<[u8; 32], Arc<ToolVerdict>>>> =
    LazyLock::new(|| Mutex::new(LruCache::new(CAPACITY)));

/// The key of a definition's verdict: each of `parts` (length-prefixed, so
/// no two lists of parts read alike) and the weights.
pub fn key(parts: &[&str], weights: &Weights) -> [u8; 32] {
    let mut h = Sha256::new();
    for w in weights.0 {
        h.update(w.to_bits().to_le_bytes());
    }
    for part in parts {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// The verdict remembered under `key`.
pub fn get(key: &[u8; 32]) -> Option<Arc<ToolVerdict>> {
    VERDICTS.lock().ok()?.get(key).cloned()
}

/// Remembers `verdict` under `key` (not one with a name over
/// [`NAME_BYTES`]) and returns the verdict remembered: one already there
/// when the same definition was scored meanwhile (the first stays).
pub fn remember(key: [u8; 32], verdict: Arc<ToolVerdict>) -> Arc<ToolVerdict> {
    if verdict.name.len() > NAME_BYTES {
        return verdict;
    }
    let Ok(mut verdicts) = VERDICTS.lock() else {
        return verdict;
    };
    Arc::clone(verdicts.get_or_insert(key, || verdict))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guardrail::detector::Family;

    #[test]
    fn every_part_and_weight_is_in_the_key() {
        let w = Weights::default();
        let base = key(&["add", "Adds.", "add\nAdds.\n"], &w);
        assert_eq!(base, key(&["add", "Adds.", "add\nAdds.\n"], &w));
        // The same bytes cut into other parts.
        assert_ne!(base, key(&["ad", "dAdds.", "add\nAdds.\n"], &w));
        assert_ne!(base, key(&["add", "Adds.", "add\nAdds.\n "], &w));
        let mut other = Weights::default();
        other.set(Family::InstructionOverride, 0.5);
        assert_ne!(base, key(&["add", "Adds.", "add\nAdds.\n"], &other));
    }
}
