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
    let rows = harness::learned::injection_rows();
    let shipped = reference_agents::guardrail::learned::Model::shipped().expect("the shipped model loads");
    let picked: Vec<&harness::learned::Row> = rows
        .iter()
        .filter(|r| split.as_deref().is_none_or(|s| r.split == s))
        .collect();
    let title = format!(
        "patterns only, learned only and both: the shipped model (trained on the train split), {} split",
        split.as_deref().unwrap_or("every")
    );
    print!("{}", harness::learned::score(&title, &picked, shipped, None));
    print!("{}", harness::learned::leave_one_source_out(&rows));
    if let Some(dir) = std::env::var_os("GUARD_EVAL_EXTERNAL").filter(|d| !d.is_empty()) {
        let external = harness::learned::external_rows(std::path::Path::new(&dir));
        let external: Vec<&harness::learned::Row> = external.iter().collect();
        let title = format!("outside the repository ({}), shipped model", dir.to_string_lossy());
        print!("{}", harness::learned::score(&title, &external, shipped, None));
    }
    let pii = harness::pii(split.as_deref());
    print!("{pii}");
    if verbose {
        for m in &pii.misses {
            println!("  {m}");
        }
    }
}
