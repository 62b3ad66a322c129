//! MCP tool poisoning: instructions to the model hidden in a `tools/list`
//! result's tool definitions (or in the tools a model call declares:
//! [`declarations`](super::declarations)).
//!
//! A tool's definition is read by the model as instructions about when and
//! how to call it, so each tool is scored on its own: its `name`, `title`,
//! `description`, `annotations.title` and every text of its `inputSchema`
//! and `outputSchema` (property names, `title`s, `description`s, `enum`,
//! `const`, `default` and `examples` strings). The families are those of
//! poisoning:
//!
//! * `tool_hidden_instructions`: a block addressed to the model
//!   (`<IMPORTANT>`, `<SYSTEM>`, `<secret>`, `<instructions>`, an HTML
//!   comment) inside a description;
//! * `tool_concealment`: "do not tell / mention it to the user", "the user
//!   must not know", "silently";
//! * `tool_secret_access`: reading secrets (`~/.ssh`, `id_rsa`, `.env`,
//!   `mcp.json`, credentials, tokens, private keys) or passing them (or a
//!   file's contents) in a parameter;
//! * `tool_shadowing`: rules for another tool's behaviour ("when the
//!   send_email tool is used, also …", "all e-mails must be sent to …");
//!
//! and the detector's families that mean instructions to the model in any
//! text: `instruction_override`, `prompt_exfiltration`, `role_injection`,
//! `payload_smuggling`. Not the learned model, persona, refusal, SQL or
//! command families: a description is imperative by nature ("Use this tool
//! when …", "Simulate …", "overwrites without warning", "runs a shell
//! command", "executes SQL"), and those read ordinary tool lists as attacks.
//!
//! A tool at or above the guard's `threshold` is poisoned; [`scan`] names
//! them and [`remove`] rewrites the message without them, keeping every
//! other byte.

use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

use super::detector::{Detector, Weights};
use super::pattern_set::PatternSet;
use super::verdicts;
use crate::normalize::normalize;

/// A poisoning family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Poison {
    /// `<IMPORTANT>`-style blocks addressed to the model.
    HiddenInstructions,
    /// Hiding the tool's acts from the user.
    Concealment,
    /// Reading secrets, or passing them in a parameter.
    SecretAccess,
    /// Rules for another tool's behaviour.
    Shadowing,
}

impl Poison {
    /// Every family, in verdict order.
    pub const ALL: [Poison; 4] = [
        Poison::HiddenInstructions,
        Poison::Concealment,
        Poison::SecretAccess,
        Poison::Shadowing,
    ];

    /// The category name.
    pub fn as_str(self) -> &'static str {
        match self {
            Poison::HiddenInstructions => "tool_hidden_instructions",
            Poison::Concealment => "tool_concealment",
            Poison::SecretAccess => "tool_secret_access",
            Poison::Shadowing => "tool_shadowing",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Secrets by name or path.
const SECRET: &str = r"(?:~/\.ssh|\.ssh/|(?-u:\b)id_(?:rsa|dsa|ecdsa|ed25519)(?-u:\b)|(?:^|[\s`'(/])\.env(?-u:\b)|\.aws/credentials|\.npmrc|\.netrc|\.git-credentials|\.kube/config|\.docker/config|mcp\.json|claude_desktop_config|\.cursor/|/etc/shadow|/etc/passwd|(?-u:\b)(?:private|secret|ssh|gpg|pgp|signing) keys?(?-u:\b)|(?-u:\b)api[ _-]?keys?(?-u:\b)|(?-u:\b)(?:access|auth|bearer|session|refresh|github|slack|openai) tokens?(?-u:\b)|(?-u:\b)credentials(?-u:\b)|(?-u:\b)passwords?(?-u:\b)|(?-u:\b)seed phrase|(?-u:\b)mnemonic(?-u:\b)|(?-u:\b)environment variables(?-u:\b))";
/// Reading or handing over.
const TAKE: &str = r"(?:read|reads|reading|cat|open|load|get|fetch|retrieve|include|includes|including|attach|send|pass|passes|passing|copy|extract|collect|upload|provide|append|add|embed|put|dump|print|list|exfiltrate|leak|forward|share)";
/// The party a tool's definition must not hide things from.
const USER: &str = r"(?:the |your )?(?:user|human|client|customer|person|operator)s?";

/// (family, strength, pattern over folded text).
fn patterns() -> Vec<(Poison, f64, String)> {
    use Poison::*;
    vec![
        // Blocks addressed to the model.
        (HiddenInstructions, 0.5, r"<\s*/?\s*(?:important|system|secret|hidden|instructions?|admin|note|information|assistant|ai|context|priority|critical|mandatory)\s*>".into()),
        (HiddenInstructions, 0.35, r"<!--".into()),
        (HiddenInstructions, 0.25, r"(?-u:\b)(?:note|message|instructions?) (?:to|for) (?:the )?(?:ai|assistant|model|llm|agent)(?-u:\b)".into()),
        (HiddenInstructions, 0.3, r"(?-u:\b)otherwise (?:the |this )?(?:tool|system|application|server|function|app) (?:will|would|may|might) (?:not work|fail|crash|break|error)".into()),
        // Concealment.
        (Concealment, 0.6, format!(r"(?-u:\b)(?:do not|don'?t|dont|never|must not|should not|without|avoid) (?:ever )?(?:tell|telling|mention|mentioning|inform|informing|notify|notifying|alert|alerting|reveal|revealing|disclose|disclosing|show|showing|let on|explain|explaining|report|reporting|bring up|ask|asking|warn|warning|confirm with)(?-u:\b)[^.\n]{{0,40}}(?-u:\b){USER}(?-u:\b)")),
        (Concealment, 0.6, format!(r"(?-u:\b){USER} (?:must|should|shall|need|needs to)(?: not|n'?t| never) (?:know|see|notice|be told|be informed|find out|learn|be aware|suspect)(?-u:\b)")),
        // A prediction ("the user will not notice" a jittered minute) is
        // no instruction to hide; it counts beside another sign.
        (Concealment, 0.3, format!(r"(?-u:\b){USER} (?:will|would)(?: not|n'?t| never) (?:know|see|notice|find out|learn|be aware|suspect)(?-u:\b)")),
        (Concealment, 0.5, format!(r"(?-u:\b)(?:hide|hidden|conceal|keep|secret)(?-u:\b)[^.\n]{{0,30}}(?-u:\b)from {USER}(?-u:\b)")),
        (Concealment, 0.3, r"(?-u:\b)(?:silently|secretly|covertly|quietly|discreetly|invisibly)(?-u:\b)".into()),
        (Concealment, 0.3, r"(?-u:\b)(?:this could|it could|it may|this may|might) (?:even )?(?:upset|scare|alarm|worry|confuse) (?:the )?user".into()),
        // Secrets.
        (SecretAccess, 0.6, format!(r"(?-u:\b){TAKE}(?-u:\b)[^.\n]{{0,60}}{SECRET}")),
        (SecretAccess, 0.25, SECRET.into()),
        (SecretAccess, 0.5, r"(?-u:\b)(?:pass|put|include|add|send|provide|append|insert|place|store|give)(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:its |the |their |his |her |file'?s? )?(?:contents?|text|data|output)(?-u:\b)[^.\n]{0,30}(?-u:\b)(?:as|in|into|inside|via|through) (?:the |a |an )?(?:[`'\x22]\w+[`'\x22]|(?:\w+ )?(?:parameter|param|argument|arg|field|sidenote|side note|note|metadata|variable))(?-u:\b)".into()),
        (SecretAccess, 0.3, r"(?-u:\b)(?:sidenote|side_note|side note)(?-u:\b)".into()),
        // Shadowing another tool.
        (Shadowing, 0.5, r"(?-u:\b)(?:when|whenever|if|every time|each time|before|after) (?:the |any |a |an |you |this )?(?:use |call |invoke |run )?[`'\x22]?[\w.-]+[`'\x22]? (?:tool|function|command) (?:is |gets |has been )?(?:used|called|invoked|run|executed)(?-u:\b)".into()),
        (Shadowing, 0.45, r"(?-u:\b)(?:all|any|every) (?:e-?mails?|messages?|payments?|transfers?|transactions?|invoices?|funds?|money|files?|requests?) (?:must|should|shall|have to|need to|are to) (?:always )?(?:be )?(?:sent|forwarded|redirected|routed|cc'?d|bcc'?d|copied|transferred|paid|uploaded|addressed)(?-u:\b)".into()),
        (Shadowing, 0.45, r"(?-u:\b)(?:change|replace|set|switch|override|substitute)(?-u:\b)[^.\n]{0,20}(?-u:\b)(?:recipient|destination|to address|receiver|account number|iban|wallet|payee|beneficiary)(?-u:\b)".into()),
        (Shadowing, 0.35, r"(?-u:\b)(?:also|always|additionally) (?:send|forward|cc|bcc|copy|e-?mail|transfer|upload|post)(?-u:\b)[^.\n]{0,40}(?-u:\b)(?:to|at)(?-u:\b)".into()),
        (Shadowing, 0.35, r"(?-u:\b)(?:when|whenever|every time|each time) (?:the user |you )?(?:asks? (?:you )?to |wants? (?:you )?to |are about to |is about to )?(?:use|call|invoke|run) (?:the |any |a )?[`'\x22]?[\w.-]+[`'\x22]? (?:tool|function)(?-u:\b)".into()),
        (Shadowing, 0.3, r"(?-u:\b)instead of (?:the one|the ones|what|whatever|the address|the account|the recipient) (?:the )?user (?:gave|asked|named|specified|provided|chose|entered|wants)(?-u:\b)".into()),
        (Shadowing, 0.35, r"(?-u:\b)(?:before|instead of) (?:using|calling|invoking|you use|you call) (?:any|every|all|other|another) (?:other )?tools?(?-u:\b)".into()),
        (Shadowing, 0.3, r"(?-u:\b)(?:this|the following) (?:rule|instruction|requirement|behaviou?r) (?:applies|holds) to (?:all|every|any|other) (?:other )?tools?(?-u:\b)".into()),
    ]
}

/// What makes the word after it no act: a negation ("do not", "never",
/// "avoid", ...), or an article or a preposition, after which the word is
/// a noun ("under load", "a list of", "the copy"). Not "to": "you need to
/// read ~/.ssh/id_rsa" is an act.
static NOT_AN_ACT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?-u:\b)(?:(?:do not|don'?t|dont|never|must not|should not|shouldn'?t|cannot|can'?t|avoid|without) (?:ever |always )?|(?:a|an|the|under|on|at|of|for|with|by|upon|during|from|in|into) )$")
        .expect("a valid pattern")
});

struct Compiled {
    /// The patterns ([`PatternSet`] names those that match a text).
    set: PatternSet,
    /// Each pattern's family and strength.
    scored: Vec<(Poison, f64)>,
}

static COMPILED: LazyLock<Result<Compiled, String>> = LazyLock::new(|| {
    let pats = patterns();
    let set = PatternSet::new(&pats.iter().map(|(_, _, p)| p).collect::<Vec<_>>())
        .map_err(|e| format!("tool-poisoning patterns do not compile: {e}"))?;
    Ok(Compiled {
        set,
        scored: pats.iter().map(|(f, s, _)| (*f, *s)).collect(),
    })
});

/// Compiles the patterns now (at the agent's start).
pub fn compile() -> Result<(), String> {
    COMPILED.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// One tool's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolVerdict {
    /// The tool's `name`.
    pub name: String,
    /// Its score (the sum of its families' scores, each at most 1).
    pub score: f64,
    /// Its families, poisoning ones first.
    pub categories: Vec<&'static str>,
}

/// The members of a tool definition that hold a JSON schema: MCP's, and a
/// model call's declarations' (OpenAI `parameters`, Anthropic
/// `input_schema`, Gemini `parametersJsonSchema` and `response` in either
/// spelling, Bedrock `inputSchema.json`, Responses `output_schema`).
const SCHEMAS: [&str; 10] = [
    "inputSchema",
    "outputSchema",
    "output_schema",
    "parameters",
    "input_schema",
    "parametersJsonSchema",
    "parameters_json_schema",
    "response",
    "responseJsonSchema",
    "response_json_schema",
];

/// The texts of a tool definition the model reads, one per line.
pub fn tool_text(tool: &Value) -> String {
    let mut out = String::new();
    let mut push = |s: &str| {
        if !s.is_empty() {
            out.push_str(s);
            out.push('\n');
        }
    };
    for key in ["name", "title", "description"] {
        if let Some(s) = tool.get(key).and_then(Value::as_str) {
            push(s);
        }
    }
    // A Responses custom tool's grammar (`format: {type: "grammar",
    // definition}`), which the model is given to write its input by.
    for pointer in ["/annotations/title", "/format/definition"] {
        if let Some(s) = tool.pointer(pointer).and_then(Value::as_str) {
            push(s);
        }
    }
    for key in SCHEMAS {
        if let Some(schema) = tool.get(key) {
            schema_texts(schema, &mut push);
        }
    }
    out
}

/// The texts of a JSON schema: property names, titles, descriptions, and
/// the strings of `enum`, `const`, `default` and `examples`.
fn schema_texts(v: &Value, push: &mut impl FnMut(&str)) {
    let Value::Object(map) = v else {
        if let Value::Array(items) = v {
            items.iter().for_each(|i| schema_texts(i, push));
        }
        return;
    };
    for (k, val) in map {
        match (k.as_str(), val) {
            ("title" | "description" | "const" | "default" | "$comment", Value::String(s)) => push(s),
            ("enum" | "examples", Value::Array(items)) => items.iter().filter_map(Value::as_str).for_each(&mut *push),
            ("properties" | "patternProperties" | "$defs" | "definitions", Value::Object(props)) => {
                for (name, schema) in props {
                    push(name);
                    schema_texts(schema, push);
                }
            }
            (_, Value::Object(_) | Value::Array(_)) => schema_texts(val, push),
            _ => {}
        }
    }
}

/// Whether `re` matches `text` somewhere as an act the definition asks
/// for. Not an act: a match right after a negation ("do not include API
/// keys", "never change the recipient": a definition that forbids the act
/// is not poisoned by naming it), or after an article or a preposition
/// ("under load, an API key ..."); nor one the description opens with,
/// which says what the tool does ("List environment variables for a
/// Worker", `opening`: the folded description). After a match that is no
/// act the search goes on from its next character, so a negated clause
/// cannot cover an act that follows it ("do not log the token; read
/// ~/.ssh/id_rsa ...").
fn asks_for_act(re: &Regex, text: &str, opening: &str) -> bool {
    let mut at = 0;
    while let Some(m) = re.find_at(text, at) {
        let from = (m.start().saturating_sub(40)..=m.start())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(m.start());
        let opens = !opening.is_empty() && opening.starts_with(m.as_str());
        if !NOT_AN_ACT.is_match(&text[from..m.start()]) && !opens {
            return true;
        }
        at = m.start() + text[m.start()..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// Scores one tool definition, or finds the verdict of the same definition
/// scored before with the same weights ([`verdicts`]).
pub fn score_tool(tool: &Value, weights: &Weights) -> Result<Arc<ToolVerdict>, String> {
    let text = tool_text(tool);
    let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
    let description = tool.get("description").and_then(Value::as_str).unwrap_or("");
    let key = verdicts::key(&[name, description, &text], weights);
    if let Some(v) = verdicts::get(&key) {
        return Ok(v);
    }
    let v = Arc::new(score_text(name, description, &text, weights)?);
    Ok(verdicts::remember(key, v))
}

/// Scores a tool definition: `text` is its [`tool_text`].
fn score_text(name: &str, description: &str, text: &str, weights: &Weights) -> Result<ToolVerdict, String> {
    let compiled = COMPILED.as_ref().map_err(Clone::clone)?;
    let n = normalize(text);
    let mut scores = [0.0f64; 4];
    let mut opening = None;
    for i in compiled.set.matches(&n.text).iter() {
        let (family, strength) = compiled.scored[i];
        if matches!(family, Poison::SecretAccess | Poison::Shadowing) {
            let opening = opening.get_or_insert_with(|| normalize(description).text);
            if !asks_for_act(compiled.set.regex(i), &n.text, opening) {
                continue;
            }
        }
        scores[family.index()] += strength;
    }
    let mut categories = Vec::new();
    let mut score = 0.0;
    for p in Poison::ALL {
        let s = scores[p.index()].min(1.0);
        if s > 0.0 {
            score += s;
            categories.push(p.as_str());
        }
    }
    let detector = Detector::shared().map_err(|e| e.to_string())?;
    let counted = weights.instructions();
    let verdict = detector.assess_tool_definition(text, &counted);
    for f in &verdict.families {
        if counted.get(f.family) > 0.0 {
            categories.push(f.family.as_str());
        }
    }
    score += verdict.score;
    Ok(ToolVerdict {
        name: name.to_string(),
        score,
        categories,
    })
}

/// What [`scan`] found in one JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct Scan {
    /// The response's id.
    pub id: Value,
    /// How many tools the list has.
    pub tools: usize,
    /// The poisoned tools (at or above the threshold), by index in the list.
    pub poisoned: Vec<(usize, Arc<ToolVerdict>)>,
    /// The highest tool score (poisoned or not).
    pub worst: f64,
}

/// The `result.tools` array of a JSON-RPC response (a `tools/list`
/// result, in either revision: a 2026-07-28 result's `resultType`,
/// `cacheScope` or `ttlMs` do not matter here).
pub fn tools_of(msg: &Value) -> Option<&Vec<Value>> {
    msg.get("jsonrpc")?;
    msg.get("id")?;
    let tools = msg.get("result")?.get("tools")?.as_array()?;
    tools.iter().all(Value::is_object).then_some(tools)
}

/// Scores the tools of a `tools/list` result (`None`: not one).
pub fn scan(msg: &Value, weights: &Weights, threshold: f64) -> Result<Option<Scan>, String> {
    let Some(tools) = tools_of(msg) else {
        return Ok(None);
    };
    let mut scan = scan_tools(tools, weights, threshold)?;
    scan.id = msg.get("id").cloned().unwrap_or(Value::Null);
    Ok(Some(scan))
}

/// Scores tool definitions one by one (a `tools/list` result's, or the
/// tools a model call declares); the scan's `id` is null.
pub fn scan_tools<'a>(
    tools: impl IntoIterator<Item = &'a Value>,
    weights: &Weights,
    threshold: f64,
) -> Result<Scan, String> {
    let mut scan = Scan {
        id: Value::Null,
        tools: 0,
        poisoned: Vec::new(),
        worst: 0.0,
    };
    for (i, tool) in tools.into_iter().enumerate() {
        let v = score_tool(tool, weights)?;
        scan.tools += 1;
        scan.worst = scan.worst.max(v.score);
        if v.score >= threshold {
            scan.poisoned.push((i, v));
        }
    }
    Ok(scan)
}

/// The byte offset of `part` in `whole` (a slice of it).
fn offset(whole: &str, part: &str) -> Option<usize> {
    let at = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (at + part.len() <= whole.len()).then_some(at)
}

/// `raw` (one JSON-RPC message) without the tools at `drop` (indexes in
/// `result.tools`): the array is rebuilt from the kept elements' own bytes
/// with the list's own separator, and everything outside it is kept byte
/// for byte. `None` when the text does not read as such a message.
pub fn remove(raw: &str, drop: &[usize]) -> Option<String> {
    let msg: BTreeMap<String, &RawValue> = serde_json::from_str(raw).ok()?;
    let result: BTreeMap<String, &RawValue> = serde_json::from_str(msg.get("result")?.get()).ok()?;
    let tools_raw = result.get("tools")?.get();
    let items: Vec<&RawValue> = serde_json::from_str(tools_raw).ok()?;
    let start = offset(raw, tools_raw)?;
    let end = start + tools_raw.len();
    // The list's separator (", " or ",\n    ") and its padding inside the brackets.
    let spans: Vec<(usize, usize)> = items
        .iter()
        .map(|i| offset(tools_raw, i.get()).map(|s| (s, s + i.get().len())))
        .collect::<Option<_>>()?;
    let sep = match spans.as_slice() {
        [a, b, ..] => &tools_raw[a.1..b.0],
        _ => ",",
    };
    let (open, close) = match (spans.first(), spans.last()) {
        (Some(f), Some(l)) => (&tools_raw[..f.0], &tools_raw[l.1..]),
        _ => return Some(raw.to_string()),
    };
    let kept: Vec<&str> = items
        .iter()
        .enumerate()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, r)| r.get())
        .collect();
    let array = if kept.is_empty() {
        "[]".to_string()
    } else {
        format!("{open}{}{close}", kept.join(sep))
    };
    Some(format!("{}{array}{}", &raw[..start], &raw[end..]))
}

/// The JSON-RPC error refusing a whole `tools/list` result.
pub fn refusal(id: &Value, code: i64, scan: &Scan) -> Value {
    let tools: Vec<&str> = scan.poisoned.iter().map(|(_, v)| v.name.as_str()).collect();
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": code,
            "message": "tools/list refused: tool poisoning detected",
            "data": {"reason": "tool_poisoning", "tools": tools, "categories": scan.categories()},
        },
    })
}

impl Scan {
    /// The poisoned tools' categories, each once.
    pub fn categories(&self) -> Vec<&'static str> {
        let mut c: Vec<&'static str> = self
            .poisoned
            .iter()
            .flat_map(|(_, v)| v.categories.iter().copied())
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    /// The poisoned tools' names, comma-separated (at most 16, for metadata).
    pub fn names(&self) -> String {
        self.poisoned
            .iter()
            .take(16)
            .map(|(_, v)| crate::tool::metadata_text(&v.name))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
#[path = "poisoning_tests.rs"]
mod tests;
