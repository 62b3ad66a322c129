//! `make eval-guard`: the guardrail evaluation harness's figures.
//!
//! `cargo run -p reference-agents --example eval_guard -- [--split train|test|all] [--verbose]`
//! (default: the test split). `--verbose` lists false positives and misses.

#[path = "../tests/guard_eval/harness.rs"]
#[allow(dead_code)]
mod harness;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = match args.iter().position(|a| a == "--split").and_then(|i| args.get(i + 1)) {
        Some(s) if s == "all" => None,
        Some(s) => Some(s.clone()),
        None => Some("test".to_string()),
    };
    let verbose = args.iter().any(|a| a == "--verbose");
    println!(
        "corpus: {} (split: {})",
        harness::corpus_dir().display(),
        split.as_deref().unwrap_or("all")
    );
    let inj = harness::injection(split.as_deref());
    if verbose {
        print!("{inj}");
    } else {
        let mut short = inj;
        short.false_positive_texts.clear();
        short.missed_texts.clear();
        print!("{short}");
    }
    let pii = harness::pii(split.as_deref());
    print!("{pii}");
    if verbose {
        for m in &pii.misses {
            println!("  {m}");
        }
    }
}
