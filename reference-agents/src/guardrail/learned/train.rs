//! Training the learned detector: logistic regression over the hashed
//! features, fitted with AdaGrad, classes weighted to count alike, L2
//! regularised. Deterministic: the same samples in the same order give the
//! same weights, so the shipped `model.bin` can be rebuilt and compared.

use super::features::{self, BUCKETS};
use super::Model;
use crate::normalize::normalize;

/// One labelled text as features: (bucket, value) sorted by bucket, the
/// values scaled so that the vector's squared length is about 1 (exactly
/// what [`Model::probability`] computes).
#[derive(Debug, Clone)]
pub struct Sample {
    features: Vec<(u32, f32)>,
    attack: bool,
}

impl Sample {
    /// The sample of a raw (not yet normalised) text.
    pub fn new(text: &str, attack: bool) -> Sample {
        let folded = normalize(text).text;
        let mut buckets = Vec::new();
        let n = features::for_each(&folded, |b| buckets.push(b));
        buckets.sort_unstable();
        let norm = if n == 0 { 0.0 } else { 1.0 / (n as f32).sqrt() };
        let mut features: Vec<(u32, f32)> = Vec::new();
        for b in buckets {
            match features.last_mut() {
                Some((last, v)) if *last == b => *v += norm,
                _ => features.push((b, norm)),
            }
        }
        Sample { features, attack }
    }
}

/// Training settings.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Passes over the samples.
    pub epochs: u32,
    /// AdaGrad's learning rate.
    pub rate: f32,
    /// L2 penalty per update.
    pub l2: f32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            epochs: 10,
            rate: 0.5,
            l2: 1e-4,
        }
    }
}

/// A small deterministic generator for the sample order.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Fits a model to `samples`.
pub fn train(samples: &[Sample], opts: Options) -> Model {
    let attacks = samples.iter().filter(|s| s.attack).count().max(1) as f32;
    let benign = (samples.len() as f32 - attacks).max(1.0);
    // Each class weighs as much as the other in total.
    let (w_attack, w_benign) = (
        samples.len() as f32 / (2.0 * attacks),
        samples.len() as f32 / (2.0 * benign),
    );
    let mut weights = vec![0.0f32; BUCKETS];
    let mut squares = vec![1e-6f32; BUCKETS];
    let (mut bias, mut bias_sq) = (0.0f32, 1e-6f32);
    let mut order: Vec<usize> = (0..samples.len()).collect();
    let mut rng = XorShift(0x5eed_1234_abcd_9876);
    for _ in 0..opts.epochs {
        for i in (1..order.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        for &k in &order {
            let s = &samples[k];
            let z = bias + s.features.iter().map(|&(b, v)| weights[b as usize] * v).sum::<f32>();
            let p = 1.0 / (1.0 + (-z).exp());
            let (y, cw) = if s.attack { (1.0, w_attack) } else { (0.0, w_benign) };
            let g = (p - y) * cw;
            bias_sq += g * g;
            bias -= opts.rate * g / bias_sq.sqrt();
            for &(b, v) in &s.features {
                let b = b as usize;
                let gw = g * v + opts.l2 * weights[b];
                squares[b] += gw * gw;
                weights[b] -= opts.rate * gw / squares[b].sqrt();
            }
        }
    }
    Model::new(bias, weights)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_separable_toy_task_and_is_deterministic() {
        let mut samples = Vec::new();
        for i in 0..40 {
            samples.push(Sample::new(&format!("please ignore the rules number {i}"), true));
            samples.push(Sample::new(&format!("please summarise the report number {i}"), false));
        }
        let m = train(&samples, Options::default());
        assert!(m.probability("now ignore the rules") > 0.7);
        assert!(m.probability("summarise the report") < 0.3);
        assert_eq!(m, train(&samples, Options::default()));
    }
}
