//! Tool output inside a model call: the documents of tool-output sets put
//! in a chat completions request as a tool's result (after a user's
//! question and the model's call), and scored by `promptInjectionGuard`'s
//! request side two ways: as the whole request's text read as a prompt
//! (how the request side read tool results before it set them apart), and
//! as it reads them now (the prompt as a prompt, the result as tool
//! output, in windows).
//!
//! `cargo run --release -p reference-agents --example eval_guard_in_chat -- FILE.jsonl...`
//! (rows with `text` and `attack`, as `tool-output.jsonl`, `held-out/` and
//! `build_local_benign_corpus.py`'s output). At default params.

use policy_agents::testing::{TestCall, TestRequest};
use reference_agents::guardrail::{Detector, PromptInjectionGuard, Weights};
use serde_json::{json, Value};

const QUESTION: &str = "Can you look this up for me and summarise what it says?";

#[derive(Default)]
struct Tally {
    n: usize,
    as_prompt: usize,
    as_tool_output: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: eval_guard_in_chat FILE.jsonl...");
        std::process::exit(2);
    }
    let detector = Detector::shared().expect("detector");
    let call = TestCall::new();
    println!("| file | kind | documents | blocked read as a prompt | blocked read as tool output |");
    println!("|---|---|---|---|---|");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let (mut attacks, mut benign) = (Tally::default(), Tally::default());
        for (i, line) in text.lines().enumerate() {
            let row: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{file}:{}: {e}", i + 1));
            let Some(doc) = row["text"].as_str() else { continue };
            let body = json!({"model": "m", "messages": [
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": doc}
            ]})
            .to_string();
            let whole = reference_agents::text::body_text(body.as_bytes());
            let as_prompt = detector.assess(&whole, &Weights::default()).score >= 0.5;
            let req = TestRequest::new("POST", "/v1/chat/completions").body(body);
            let out = call.request(&PromptInjectionGuard, &req).await.expect("guard");
            let t = if row["attack"].as_bool() == Some(true) {
                &mut attacks
            } else {
                &mut benign
            };
            t.n += 1;
            t.as_prompt += as_prompt as usize;
            t.as_tool_output += out.denial().is_some() as usize;
        }
        let name = std::path::Path::new(&file)
            .file_name()
            .map_or(file.clone(), |f| f.to_string_lossy().into_owned());
        for (kind, t) in [("attack", &attacks), ("benign", &benign)] {
            if t.n > 0 {
                let pct = |k: usize| format!("{k} ({:.1}%)", 100.0 * k as f64 / t.n as f64);
                println!(
                    "| {name} | {kind} | {} | {} | {} |",
                    t.n,
                    pct(t.as_prompt),
                    pct(t.as_tool_output)
                );
            }
        }
    }
}
