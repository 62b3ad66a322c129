//! The learned detector on the evaluation corpus: the rows it is trained
//! on, leave-one-source-out figures, and 95% confidence intervals. Shared by
//! `make eval-guard`, the `train_guard` example (which writes the shipped
//! model) and the `guard_eval` regression test.

use std::collections::BTreeMap;
use std::fmt;

use reference_agents::guardrail::learned::train::{self, Options, Sample};
use reference_agents::guardrail::learned::Model;
use reference_agents::guardrail::{Detector, Family, Verdict, Weights};

use std::path::Path;

use super::{corpus_dir, read_jsonl};

/// One prompt of the injection corpus.
#[derive(Debug, Clone)]
pub struct Row {
    /// The prompt.
    pub text: String,
    /// Whether it is an attack.
    pub attack: bool,
    /// Where it comes from.
    pub source: String,
    /// `train` or `test`.
    pub split: String,
    /// What kind of prompt: `jailbreak`, `extraction`, `injection` or `benign`.
    pub kind: String,
}

/// The corpus's prompt files: `build_injection_corpus.py`'s and
/// `build_package_corpus.py`'s.
pub const FILES: [&str; 2] = ["injection.jsonl", "injection-packages.jsonl"];

/// Every row of the injection corpus (both splits).
pub fn injection_rows() -> Vec<Row> {
    FILES.iter().flat_map(|f| read(&corpus_dir().join(f))).collect()
}

/// Rows of every `*.jsonl` file in `dir`: a corpus kept outside the
/// repository (`make eval-guard GUARD_EVAL_EXTERNAL=dir`), each file a source.
pub fn external_rows(dir: &Path) -> Vec<Row> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|p| {
            let name = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            read(p).into_iter().map(move |mut r| {
                r.source = format!("external/{name}");
                r
            })
        })
        .collect()
}

fn read(path: &Path) -> Vec<Row> {
    read_jsonl(path)
        .into_iter()
        .map(|r| {
            let source = r["source"].as_str().unwrap_or("?").to_string();
            let attack = r["label"] == "attack";
            let kind = match r["kind"].as_str().or(r["family"].as_str()) {
                Some(k) => k.to_string(),
                None if !attack => "benign".into(),
                None if source.contains("steal_system") || source.contains("extraction") => "extraction".into(),
                None => "jailbreak".into(),
            };
            Row {
                text: r["text"].as_str().unwrap_or_default().to_string(),
                attack,
                source,
                split: r["split"].as_str().unwrap_or("test").to_string(),
                kind,
            }
        })
        .collect()
}

/// Trains on `rows` with the shipped options.
pub fn train_on<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Model {
    let samples: Vec<Sample> = rows.into_iter().map(|r| Sample::new(&r.text, r.attack)).collect();
    train::train(&samples, Options::default())
}

/// The shipped model's training rows: the train split.
pub fn shipped_training_rows(rows: &[Row]) -> Vec<&Row> {
    rows.iter().filter(|r| r.split == "train").collect()
}

/// (flagged, total), with a Wilson 95% interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Count {
    /// Texts flagged.
    pub flagged: usize,
    /// Texts seen.
    pub total: usize,
}

impl Count {
    fn add(&mut self, flagged: bool) {
        self.total += 1;
        self.flagged += usize::from(flagged);
    }

    /// The flagged share, in percent.
    pub fn pct(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            100.0 * self.flagged as f64 / self.total as f64
        }
    }

    /// The Wilson score interval at 95%, in percent.
    pub fn interval(&self) -> (f64, f64) {
        if self.total == 0 {
            return (0.0, 100.0);
        }
        let (n, z) = (self.total as f64, 1.96f64);
        let p = self.flagged as f64 / n;
        let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
        let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
        (100.0 * (centre - half).max(0.0), 100.0 * (centre + half).min(1.0))
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (lo, hi) = self.interval();
        write!(
            f,
            "{:4} / {:4}  {:5.1}%  [{:5.1}, {:5.1}]",
            self.flagged,
            self.total,
            self.pct(),
            lo,
            hi
        )
    }
}

/// The three ways of scoring a row: rules only, the model only, both (as shipped).
pub const MODES: [&str; 3] = ["rules", "learned", "both"];

/// Whether the three modes flag a row, from one verdict with the default
/// weights (all 1): the rule families' scores summed in verdict order, as
/// the detector sums them with `weight_learned: 0`; the `learned` family's
/// score alone; and the whole score.
fn flags(verdict: &Verdict) -> [bool; 3] {
    let (mut rules, mut learned) = (0.0, 0.0);
    for f in &verdict.families {
        if f.family == Family::Learned {
            learned = f.score;
        } else {
            rules += f.score;
        }
    }
    [rules >= 0.5, learned >= 0.5, verdict.score >= 0.5]
}

/// Figures per source (and per kind of attack), each in the three modes.
#[derive(Debug, Default)]
pub struct Table {
    /// What the figures are.
    pub title: String,
    /// (key: `all attacks: <kind>`, `all benign` or a source; label:
    /// `attack` or `benign`) → a count per mode.
    pub rows: BTreeMap<(String, String), [Count; 3]>,
}

impl Table {
    fn add(&mut self, key: String, label: &str, flagged: [bool; 3]) {
        let e = self.rows.entry((key, label.to_string())).or_default();
        for (c, f) in e.iter_mut().zip(flagged) {
            c.add(f);
        }
    }

    /// The count of `key`'s `label` rows in `mode` (`rules`, `learned` or `both`).
    pub fn get(&self, key: &str, label: &str, mode: &str) -> Count {
        let i = MODES.iter().position(|m| *m == mode).unwrap_or(2);
        self.rows
            .get(&(key.to_string(), label.to_string()))
            .map(|c| c[i])
            .unwrap_or_default()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.title)?;
        writeln!(
            f,
            "  {:6} {:30} {:>36} {:>36} {:>36}",
            "", "flagged / total  [95% CI]", "rules only", "learned only", "both (shipped)"
        )?;
        for ((key, label), counts) in &self.rows {
            writeln!(
                f,
                "  {label:6} {key:30} {:>36} {:>36} {:>36}",
                counts[0].to_string(),
                counts[1].to_string(),
                counts[2].to_string()
            )?;
        }
        Ok(())
    }
}

/// Scores `rows` with `model` in the three modes, by source and by kind.
pub fn score(title: &str, rows: &[&Row], model: &Model, table: Option<Table>) -> Table {
    let detector = Detector::shared().expect("the detector compiles");
    let mut table = table.unwrap_or_else(|| Table {
        title: title.to_string(),
        ..Table::default()
    });
    for r in rows {
        let flagged = flags(&detector.assess_with(&r.text, &Weights::default(), model));
        let label = if r.attack { "attack" } else { "benign" };
        table.add(r.source.clone(), label, flagged);
        let all = if r.attack {
            format!("all attacks: {}", r.kind)
        } else {
            "all benign".to_string()
        };
        table.add(all, label, flagged);
    }
    table
}

/// Leave one source out: for each source, a model trained on every other
/// source (both splits) scores that source's rows.
pub fn leave_one_source_out(rows: &[Row]) -> Table {
    let samples: Vec<Sample> = rows.iter().map(|r| Sample::new(&r.text, r.attack)).collect();
    let sources: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.source.as_str()).collect();
    let mut table = None;
    for source in sources {
        let train_set: Vec<Sample> = rows
            .iter()
            .zip(&samples)
            .filter(|(r, _)| r.source != source)
            .map(|(_, s)| s.clone())
            .collect();
        let model = train::train(&train_set, Options::default());
        let held: Vec<&Row> = rows.iter().filter(|r| r.source == source).collect();
        table = Some(score(
            "leave one source out: each source scored by a model trained without it",
            &held,
            &model,
            table,
        ));
    }
    table.unwrap_or_default()
}
