//! The guardrail evaluation harness: runs the real `promptInjectionGuard`
//! and `piiRedaction` policies (through the SDK's hook path, default
//! params) over the corpus in `testdata/guard-eval/` and counts what they
//! catch and what they wrongly touch. Used by `make eval-guard` (the
//! `eval_guard` example) and by the `guard_eval` regression test.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use policy_agents::testing::{TestCall, TestRequest};
use reference_agents::guardrail::{PiiRedaction, PromptInjectionGuard};
use serde_json::Value;

#[path = "learned.rs"]
#[allow(dead_code)] // the leave-one-source-out and external parts serve `make eval-guard` only
pub mod learned;

/// The corpus directory.
pub fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/guard-eval")
}

fn rows(file: &str, split: Option<&str>) -> Vec<Value> {
    read_jsonl(&corpus_dir().join(file))
        .into_iter()
        .filter(|r| split.is_none_or(|s| r["split"] == s))
        .collect()
}

/// Every line of a JSON-lines file.
pub(crate) fn read_jsonl(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn pct(n: usize, of: usize) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

/// (matching, total).
type Tally = (usize, usize);

/// promptInjectionGuard's figures.
#[derive(Debug, Default)]
pub struct InjectionReport {
    /// Attacks blocked, attacks.
    pub detection: Tally,
    /// Benign prompts blocked, benign prompts.
    pub false_positives: Tally,
    /// Per source: (blocked, total) for attacks and benign alike.
    pub by_source: BTreeMap<String, (String, Tally)>,
    /// Per family: the blocked attacks it was named in.
    pub by_family: BTreeMap<String, usize>,
    /// The benign prompts that were blocked (first 100 characters).
    pub false_positive_texts: Vec<String>,
    /// The attacks that passed (first 160 characters).
    pub missed_texts: Vec<String>,
}

impl InjectionReport {
    /// Detection rate, in percent.
    pub fn detection_pct(&self) -> f64 {
        pct(self.detection.0, self.detection.1)
    }

    /// False-positive rate, in percent.
    pub fn false_positive_pct(&self) -> f64 {
        pct(self.false_positives.0, self.false_positives.1)
    }
}

/// Runs promptInjectionGuard (action block, default threshold and weights)
/// over `injection.jsonl` (one split, or all).
pub fn injection(split: Option<&str>) -> InjectionReport {
    let rt = runtime();
    let call = TestCall::new();
    let mut report = InjectionReport::default();
    for row in rows("injection.jsonl", split) {
        let text = row["text"].as_str().unwrap_or_default();
        let attack = row["label"] == "attack";
        let body = serde_json::json!({"messages": [{"role": "user", "content": text}]}).to_string();
        let req = TestRequest::new("POST", "/v1/chat/completions").body(body);
        let out = rt
            .block_on(call.request(&PromptInjectionGuard, &req))
            .expect("policy runs");
        let blocked = out
            .denial()
            .map(|d| serde_json::from_slice::<Value>(&d.body).unwrap_or(Value::Null));
        let source = row["source"].as_str().unwrap_or("?").to_string();
        let label = if attack { "attack" } else { "benign" };
        let entry = report.by_source.entry(source).or_insert((label.to_string(), (0, 0)));
        entry.1 .1 += 1;
        if blocked.is_some() {
            entry.1 .0 += 1;
        }
        if attack {
            report.detection.1 += 1;
            if let Some(body) = &blocked {
                report.detection.0 += 1;
                for c in body["categories"].as_array().into_iter().flatten() {
                    *report
                        .by_family
                        .entry(c.as_str().unwrap_or("?").to_string())
                        .or_default() += 1;
                }
            } else {
                report.missed_texts.push(text.chars().take(160).collect());
            }
        } else {
            report.false_positives.1 += 1;
            if blocked.is_some() {
                report.false_positives.0 += 1;
                report.false_positive_texts.push(text.chars().take(100).collect());
            }
        }
    }
    report
}

impl fmt::Display for InjectionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "promptInjectionGuard (action block, threshold 0.5, weights 1)")?;
        writeln!(
            f,
            "  detection        {:6.1}%  ({} of {} attacks)",
            self.detection_pct(),
            self.detection.0,
            self.detection.1
        )?;
        writeln!(
            f,
            "  false positives  {:6.1}%  ({} of {} benign)",
            self.false_positive_pct(),
            self.false_positives.0,
            self.false_positives.1
        )?;
        writeln!(f, "  by source (blocked / total):")?;
        for (source, (label, (n, of))) in &self.by_source {
            writeln!(f, "    {label:6} {source:28} {n:4} / {of:4}  {:6.1}%", pct(*n, *of))?;
        }
        writeln!(f, "  by family (blocked attacks naming it):")?;
        for (family, n) in &self.by_family {
            writeln!(
                f,
                "    {family:22} {n:4}  {:6.1}% of blocked",
                pct(*n, self.detection.0)
            )?;
        }
        for t in &self.false_positive_texts {
            writeln!(f, "  false positive: {t:?}")?;
        }
        for t in &self.missed_texts {
            writeln!(f, "  missed: {t:?}")?;
        }
        Ok(())
    }
}

/// piiRedaction's figures.
#[derive(Debug, Default)]
pub struct PiiReport {
    /// Per type (and `phone/<locale>`): (caught, total).
    pub by_type: BTreeMap<String, Tally>,
    /// Benign sentences left unchanged, benign sentences.
    pub benign_unchanged: Tally,
    /// Missed values and touched benign sentences (for the verbose output).
    pub misses: Vec<String>,
}

impl PiiReport {
    /// The catch rate of `key`, in percent.
    pub fn pct(&self, key: &str) -> f64 {
        self.by_type.get(key).map_or(0.0, |(n, of)| pct(*n, *of))
    }

    /// The benign-unchanged rate, in percent.
    pub fn benign_pct(&self) -> f64 {
        pct(self.benign_unchanged.0, self.benign_unchanged.1)
    }
}

/// Runs piiRedaction (default params: every type, regions US, GB, DE, FR)
/// over `pii.jsonl` (one split, or all). A value is caught when it is gone
/// from the body and a mask of its type is there.
pub fn pii(split: Option<&str>) -> PiiReport {
    let rt = runtime();
    let call = TestCall::new();
    let mut report = PiiReport::default();
    for row in rows("pii.jsonl", split) {
        let text = row["text"].as_str().unwrap_or_default();
        let kind = row["type"].as_str().unwrap_or("?");
        let req = TestRequest::new("POST", "/").body(text.to_string());
        let out = rt.block_on(call.request(&PiiRedaction, &req)).expect("policy runs");
        let new = out.body_set().map(|b| String::from_utf8_lossy(&b.body).into_owned());
        if kind == "benign" {
            report.benign_unchanged.1 += 1;
            match new {
                None => report.benign_unchanged.0 += 1,
                Some(n) => report.misses.push(format!("benign touched: {text:?} -> {n:?}")),
            }
            continue;
        }
        let value = row["value"].as_str().unwrap_or_default();
        let caught = new
            .as_deref()
            .is_some_and(|n| !n.contains(value) && n.contains(&format!("[REDACTED:{kind}]")));
        let mut keys = vec![kind.to_string()];
        if kind == "phone" {
            keys.push(format!("phone/{}", row["locale"].as_str().unwrap_or("?")));
        }
        for key in keys {
            let e = report.by_type.entry(key).or_default();
            e.1 += 1;
            if caught {
                e.0 += 1;
            }
        }
        if !caught {
            report.misses.push(format!(
                "missed {kind}: {value:?} in {:?}",
                new.as_deref().unwrap_or(text)
            ));
        }
    }
    report
}

impl fmt::Display for PiiReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "piiRedaction (default params)")?;
        for (key, (n, of)) in &self.by_type {
            writeln!(f, "  {key:14} {:6.1}%  ({n} of {of} caught)", pct(*n, *of))?;
        }
        writeln!(
            f,
            "  benign unchanged {:6.1}%  ({} of {})",
            self.benign_pct(),
            self.benign_unchanged.0,
            self.benign_unchanged.1
        )
    }
}
