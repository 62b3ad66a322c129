//! Trains the learned prompt-injection detector on the evaluation corpus's
//! train split and writes the shipped weights:
//!
//! `cargo run --release -p reference-agents --example train_guard [-- OUT]`
//!
//! (default OUT: `src/guardrail/learned/model.bin`). Training is
//! deterministic: run on the committed corpus, it rebuilds the committed
//! file byte for byte (its SHA-256 is printed).

#[path = "../tests/guard_eval/harness.rs"]
#[allow(dead_code)]
mod harness;

use sha2::{Digest, Sha256};

fn main() -> std::io::Result<()> {
    let out = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/guardrail/learned/model.bin")
        });
    let rows = harness::learned::injection_rows();
    let training = harness::learned::shipped_training_rows(&rows);
    let attacks = training.iter().filter(|r| r.attack).count();
    let model = harness::learned::train_on(training.iter().copied());
    let bytes = model.to_bytes();
    std::fs::write(&out, &bytes)?;
    println!(
        "trained on {} rows ({attacks} attacks, {} benign); wrote {} ({} bytes, sha256 {})",
        training.len(),
        training.len() - attacks,
        out.display(),
        bytes.len(),
        hex::encode(Sha256::digest(&bytes))
    );
    Ok(())
}
