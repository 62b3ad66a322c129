//! `promptInjectionGuard` on a request body. The prompt (a chat document's
//! user and assistant text, tool-call arguments; any other body's text) is
//! scored as a prompt. A chat document's system and developer text (the
//! application's own instructions: [`text::BodyParts::instructions`]) is
//! scored as a tool's definition is, only attacks on instructions counting
//! ([`Detector::assess_instructions`]), unless `request_instructions:
//! prompt` reads it as part of the prompt. What tools returned, carried back to the
//! model inside the call (`role: tool` messages, Responses `*_output`
//! items, Anthropic `tool_result` and Bedrock `toolResult` blocks, Gemini
//! `functionResponse` parts: [`text::body_parts`]), is tool
//! output, whichever client executed the tool: each result is scored as the
//! response side scores a tool's reply, in windows and with tool output's
//! own families ([`windows`](super::windows)), so a long document cannot
//! dilute an injection and an ordinary one is not read as an attack on the
//! model's instructions.
//!
//! With `request_tool_results: both`, the prompt scored is the whole text,
//! tool results included (the reading for clients not trusted to label
//! what a tool returned: a jailbreak put in a tool message is read as a
//! prompt too), and each result is still scored as tool output.
//!
//! The tool declarations of a chat document (`tools`, `functions`,
//! `toolConfig`: [`declarations`]) are checked for tool poisoning first,
//! tool by tool as a `tools/list` result is (`request_tool_declarations:
//! check`, the default; `ignore` skips them). With `action: block` a call
//! that declares a poisoned tool is refused: 403 `{"error": "forbidden",
//! "reason": "tool_poisoning", "tools": [...], "categories": [...]}`; with
//! `flag` it goes on with `x-prompt-risk`. Metadata as the response side's:
//! `tool_poisoning` (`refused`, `flagged`), `tool_poisoning_tools`,
//! `tool_poisoning_categories`, `tool_poisoning_score`.
//!
//! The worst of the prompt and the results decides. Metadata:
//! `prompt_risk_score`, `prompt_risk_categories`, `prompt_risk_spans` (byte
//! ranges in the text that decided), and `prompt_risk_source` (`prompt`,
//! `instructions`, or `tool_result:N`: the document's N-th tool result,
//! from 0). A block's body
//! names the source too.

use serde_json::Value;

use super::declarations;
use super::detector::{Detector, Verdict};
use super::injection::{round, spans, Action, GuardParams, MAX_SPANS};
use super::metrics;
use super::poisoning::Scan;
use crate::text;
use policy_agents::{PolicyError, RequestOutcome};

/// Where the deciding text was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Prompt,
    Instructions,
    ToolResult(usize),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Prompt => f.write_str("prompt"),
            Source::Instructions => f.write_str("instructions"),
            Source::ToolResult(i) => write!(f, "tool_result:{i}"),
        }
    }
}

/// The worst verdict of `body`'s prompt and tool results, and where it was
/// (`doc`: the body parsed, when it is JSON).
fn assess(params: &GuardParams, body: &[u8], doc: Option<&Value>) -> Result<(Verdict, Source), PolicyError> {
    let detector = Detector::shared()?;
    let parts = text::parts_of(body, doc);
    // `request_instructions: prompt` and `request_tool_results: both`: the
    // instructions and the results are read as part of the prompt too (for
    // callers not trusted to write them), the results still alone as well:
    // the prompt's text, then the others' (the body is parsed once).
    let (instructions_in_prompt, instructions_alone) = match parts.instructions.is_empty() {
        true => (None, None),
        false if params.instructions_as_prompt => (Some(&parts.instructions), None),
        false => (None, Some(&parts.instructions)),
    };
    let results_as_prompt = params.tool_results_as_prompt && !parts.tool_results.is_empty();
    let mut joined = String::new();
    let prompt = if instructions_in_prompt.is_some() || results_as_prompt {
        joined.push_str(&parts.prompt);
        let results = parts.tool_results.iter().filter(|_| results_as_prompt);
        for text in instructions_in_prompt.into_iter().chain(results) {
            joined.push('\n');
            joined.push_str(text);
        }
        &joined
    } else {
        &parts.prompt
    };
    let mut worst = (detector.assess(prompt, &params.weights), Source::Prompt);
    if let Some(instructions) = instructions_alone {
        let v = super::windows::assess_instructions(detector, instructions, &params.weights);
        if v.score > worst.0.score {
            worst = (v, Source::Instructions);
        }
    }
    for (i, result) in parts.tool_results.iter().enumerate() {
        let v = super::windows::assess(detector, result, &params.weights, params.windowed);
        if v.score > worst.0.score {
            worst = (v, Source::ToolResult(i));
        }
    }
    Ok(worst)
}

/// The scan of a chat document's tool declarations, when it declares any
/// and `request_tool_declarations: check`; counted in metrics.
fn scan_declarations(params: &GuardParams, doc: Option<&Value>) -> Result<Option<Scan>, PolicyError> {
    let Some(doc) = doc.filter(|d| params.check_declarations && text::is_chat_document(d)) else {
        return Ok(None);
    };
    let scan = declarations::scan(doc, &params.weights, params.threshold).map_err(PolicyError::new)?;
    if scan.tools == 0 {
        return Ok(None);
    }
    let decision = match (scan.poisoned.is_empty(), params.action) {
        (true, _) => "pass",
        (false, Action::Block) => "refused",
        (false, Action::Flag) => "flagged",
    };
    let categories: Vec<&str> = scan
        .poisoned
        .iter()
        .flat_map(|(_, v)| v.categories.iter().copied())
        .collect();
    metrics::tool_declarations(decision, &categories);
    Ok(Some(scan))
}

/// The metadata of poisoned declarations: as the response side's for a
/// `tools/list` result.
fn with_poisoning(o: RequestOutcome, scan: &Scan, decision: &str) -> RequestOutcome {
    o.set_metadata("tool_poisoning", decision)
        .set_metadata("tool_poisoning_tools", scan.names())
        .set_metadata("tool_poisoning_categories", scan.categories().join(","))
        .set_metadata("tool_poisoning_score", format!("{:.2}", scan.worst))
}

/// The guard's request hook on a buffered body.
pub(super) fn on_request(params: &GuardParams, body: &[u8]) -> Result<RequestOutcome, PolicyError> {
    let doc = serde_json::from_slice::<Value>(body).ok();
    let poisoned = scan_declarations(params, doc.as_ref())?.filter(|s| !s.poisoned.is_empty());
    let Some(scan) = poisoned else {
        return on_prompt(params, body, doc.as_ref(), 0.0);
    };
    if params.action == Action::Block {
        let body = serde_json::json!({
            "error": "forbidden",
            "reason": "tool_poisoning",
            "tools": scan.poisoned.iter().map(|(_, v)| &v.name).collect::<Vec<_>>(),
            "categories": scan.categories(),
            "risk_score": round(scan.worst),
            "threshold": params.threshold,
        });
        let deny = RequestOutcome::deny_json(403, &body).deny_reason("tool_poisoning");
        return Ok(with_poisoning(deny, &scan, "refused"));
    }
    let out = on_prompt(params, body, doc.as_ref(), scan.worst)?;
    Ok(with_poisoning(out, &scan, "flagged"))
}

/// The prompt and tool results' decision. `flagged`: a score the request
/// is flagged with whatever the prompt scores (a poisoned declaration's,
/// with `action: flag`); `x-prompt-risk` carries the higher of the two.
fn on_prompt(
    params: &GuardParams,
    body: &[u8],
    doc: Option<&Value>,
    flagged: f64,
) -> Result<RequestOutcome, PolicyError> {
    let (verdict, source) = assess(params, body, doc)?;
    let over = verdict.score >= params.threshold;
    let flag = |o: RequestOutcome| {
        let score = if over { verdict.score.max(flagged) } else { flagged };
        if score > 0.0 {
            o.set_header("x-prompt-risk", format!("{score:.2}"))
        } else {
            o
        }
    };
    if verdict.score == 0.0 {
        return Ok(flag(RequestOutcome::proceed()));
    }
    let score = format!("{:.2}", verdict.score);
    let source = source.to_string();
    let with_metadata = |o: RequestOutcome| {
        o.set_metadata("prompt_risk_score", score.clone())
            .set_metadata("prompt_risk_categories", verdict.categories().join(","))
            .set_metadata("prompt_risk_spans", spans(&verdict))
            .set_metadata("prompt_risk_source", source.clone())
    };
    if !over || params.action == Action::Flag {
        return Ok(with_metadata(flag(RequestOutcome::proceed())));
    }
    let families: Vec<_> = verdict
        .families
        .iter()
        .map(|f| {
            serde_json::json!({
                "category": f.family.as_str(),
                "score": round(f.score),
                "spans": f.spans.iter().take(MAX_SPANS).map(|(s, e)| [s, e]).collect::<Vec<_>>(),
            })
        })
        .collect();
    let body = serde_json::json!({
        "error": "forbidden",
        "reason": "prompt_injection_detected",
        "categories": verdict.categories(),
        "detections": families,
        "risk_score": round(verdict.score),
        "threshold": params.threshold,
        "source": source,
    });
    Ok(with_metadata(
        RequestOutcome::deny_json(403, &body).deny_reason("prompt_injection_detected"),
    ))
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
