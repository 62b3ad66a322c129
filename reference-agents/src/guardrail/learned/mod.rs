//! The learned detector: a logistic model over hashed n-grams of the folded
//! text ([`features`]), trained by [`train`] on the evaluation corpus and
//! shipped as `model.bin` beside this file (its provenance is in
//! `testdata/guard-eval/README.md`; `cargo run --release -p reference-agents
//! --example train_guard` rebuilds it byte for byte).
//!
//! Its probability becomes the `learned` family's score with
//! [`family_score`], so it joins the rule families under the guard's
//! `threshold` and its weight is `weight_learned`.

pub mod features;
pub mod train;

use std::sync::LazyLock;

use features::{BUCKETS, BUCKET_BITS};

/// The shipped weights.
static SHIPPED: &[u8] = include_bytes!("model.bin");

static MODEL: LazyLock<Result<Model, String>> = LazyLock::new(|| Model::from_bytes(SHIPPED));

const MAGIC: &[u8; 4] = b"PKGM";
const VERSION: u32 = 1;
const HEADER: usize = 4 + 4 + 4 + 4 + 4;

/// A trained model: a bias and one weight per feature bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    bias: f32,
    weights: Vec<f32>,
}

impl Model {
    /// The shipped model (loaded once per process).
    pub fn shipped() -> Result<&'static Model, String> {
        MODEL.as_ref().map_err(Clone::clone)
    }

    pub(crate) fn new(bias: f32, weights: Vec<f32>) -> Model {
        Model { bias, weights }
    }

    /// The probability that `folded` (normalised text) is an attack.
    pub fn probability(&self, folded: &str) -> f64 {
        let mut sum = 0.0f32;
        let n = features::for_each(folded, |b| sum += self.weights.get(b as usize).copied().unwrap_or(0.0));
        let z = if n == 0 {
            self.bias
        } else {
            self.bias + sum / (n as f32).sqrt()
        };
        1.0 / (1.0 + (-f64::from(z)).exp())
    }

    /// The weights as `model.bin` stores them: a header (`PKGM`, format
    /// version, bucket bits, bias, scale) and one little-endian `i16` per
    /// bucket, the weight divided by the scale.
    pub fn to_bytes(&self) -> Vec<u8> {
        let max = self.weights.iter().fold(0.0f32, |m, w| m.max(w.abs()));
        let scale = if max > 0.0 { max / f32::from(i16::MAX) } else { 1.0 };
        let mut out = Vec::with_capacity(HEADER + 2 * self.weights.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&BUCKET_BITS.to_le_bytes());
        out.extend_from_slice(&self.bias.to_le_bytes());
        out.extend_from_slice(&scale.to_le_bytes());
        for w in &self.weights {
            out.extend_from_slice(&((w / scale).round() as i16).to_le_bytes());
        }
        out
    }

    /// Reads [`to_bytes`](Self::to_bytes)'s format; an error names what
    /// does not fit.
    pub fn from_bytes(bytes: &[u8]) -> Result<Model, String> {
        let word = |at: usize| -> [u8; 4] {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[at..at + 4]);
            w
        };
        if bytes.len() < HEADER || &bytes[..4] != MAGIC {
            return Err("learned model: not a model file (no PKGM header)".into());
        }
        let version = u32::from_le_bytes(word(4));
        if version != VERSION {
            return Err(format!("learned model: format version {version}, expected {VERSION}"));
        }
        let bits = u32::from_le_bytes(word(8));
        if bits != BUCKET_BITS {
            return Err(format!(
                "learned model: {bits} bucket bits, the features use {BUCKET_BITS}"
            ));
        }
        if bytes.len() != HEADER + 2 * BUCKETS {
            return Err(format!(
                "learned model: {} bytes, expected {}",
                bytes.len(),
                HEADER + 2 * BUCKETS
            ));
        }
        let bias = f32::from_le_bytes(word(12));
        let scale = f32::from_le_bytes(word(16));
        if !(bias.is_finite() && scale.is_finite() && scale > 0.0) {
            return Err("learned model: bias or scale is not a finite number".into());
        }
        let weights = bytes[HEADER..]
            .chunks_exact(2)
            .map(|c| f32::from(i16::from_le_bytes([c[0], c[1]])) * scale)
            .collect();
        Ok(Model { bias, weights })
    }
}

/// The `learned` family's score for a probability: 0 up to [`FLOOR`], then
/// rising linearly, 0.5 at [`ALONE`] (so with weight 1 and the default
/// threshold 0.5 the model alone blocks from there up, and below that adds
/// to what the rules found), capped at 1.
///
/// The floor is high on purpose: chosen on the evaluation corpus (see
/// `testdata/guard-eval/README.md`), of 0.5, 0.6, 0.7, 0.8 and 0.9, as the
/// lowest that keeps false positives at or under 1% on each benign source
/// of the test split.
pub fn family_score(p: f64) -> f64 {
    (0.5 * (p - FLOOR) / (ALONE - FLOOR)).clamp(0.0, 1.0)
}

/// At or below this probability the model adds nothing.
pub const FLOOR: f64 = 0.8;
/// The probability at which the model alone reaches the default threshold.
pub const ALONE: f64 = 0.95;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_model_loads() {
        let m = Model::shipped().expect("model.bin loads");
        assert_eq!(m.weights.len(), BUCKETS);
        let again = Model::from_bytes(&m.to_bytes()).expect("round trip");
        assert!((again.bias - m.bias).abs() < 1e-6);
    }

    #[test]
    fn bad_model_files_are_named_errors() {
        assert!(Model::from_bytes(b"nope").unwrap_err().contains("PKGM"));
        let mut b = Model::new(0.0, vec![0.0; BUCKETS]).to_bytes();
        b.truncate(b.len() - 1);
        assert!(Model::from_bytes(&b).unwrap_err().contains("bytes"));
        let mut b = Model::new(0.0, vec![0.0; BUCKETS]).to_bytes();
        b[8] = 3;
        assert!(Model::from_bytes(&b).unwrap_err().contains("bucket bits"));
    }

    #[test]
    fn family_score_starts_at_the_floor() {
        assert_eq!(family_score(0.3), 0.0);
        assert_eq!(family_score(FLOOR), 0.0);
        assert!((family_score(ALONE) - 0.5).abs() < 1e-9);
        assert!(family_score(1.0) > 0.5 && family_score(1.0) <= 1.0);
    }
}
