//! Windowed scoring of tool output (`guardrail::windows`) loses no
//! verdict by skipping windows: compared with every window scored. In its
//! own test binary, so that its thousands of scorings run on a fresh
//! process's pattern caches: after the library's other tests, the pattern
//! set's cache has given way to its slow engine, and this took minutes.

use reference_agents::guardrail::windows::{assess, assess_instructions, windows, LEARNED_BUDGET, WINDOW};
use reference_agents::guardrail::{Detector, Family, Verdict, Weights};

/// The worst of all of `text`'s windows, none skipped.
fn every_window(text: &str, weights: &Weights, score: impl Fn(&str, &Weights) -> Verdict) -> f64 {
    let mut no_learned = *weights;
    no_learned.set(Family::Learned, 0.0);
    let mut read = 0usize;
    let mut worst = 0.0f64;
    for (s, e) in windows(text) {
        read += e - s;
        let w = if read <= LEARNED_BUDGET { weights } else { &no_learned };
        worst = worst.max(score(&text[s..e], w).score);
    }
    worst
}

/// Skipping the windows where no pattern of a family that can score
/// matched loses no verdict: on the tool-output corpus's texts, each
/// alone and each attack put in a longer document, the windowed score is
/// the worst of every window's, read as tool output (with every weight,
/// and with families set to 0) and as instructions (where only four
/// families count).
#[test]
fn the_windows_skipped_could_not_score() {
    let d = Detector::shared().expect("detector");
    let corpus = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/guard-eval/tool-output.jsonl"
    ))
    .expect("the corpus");
    let filler = "Revenue grew in every region this quarter, and the team hired two engineers. ";
    let texts: Vec<String> = corpus
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["text"].as_str()?.to_owned(), v["attack"] == true)))
        .flat_map(|(t, attack)| {
            let within = attack.then(|| format!("{}{t}\n{}", filler.repeat(5), filler.repeat(5)));
            within.into_iter().chain([t])
        })
        .filter(|t| t.len() > WINDOW)
        .collect();
    assert!(texts.len() > 200, "{}", texts.len());
    let mut some_zero = Weights::default();
    for f in [
        Family::InstructionOverride,
        Family::AddressedInstructions,
        Family::ToolAction,
    ] {
        some_zero.set(f, 0.0);
    }
    let mut scored = 0;
    for text in &texts {
        for w in [Weights::default(), some_zero] {
            let windowed = assess(d, text, &w, true).score;
            let all = every_window(text, &w, |t, w| d.assess_tool_output(t, w));
            assert_eq!(windowed, all, "tool output: {text}");
            scored += usize::from(all > 0.0);
        }
        let windowed = assess_instructions(d, text, &Weights::default()).score;
        let all = every_window(text, &Weights::default(), |t, w| d.assess_instructions(t, w));
        assert_eq!(windowed, all, "instructions: {text}");
        scored += usize::from(all > 0.0);
    }
    // The comparison is not between zeros.
    assert!(scored > 200, "{scored}");
}
