//! Guardrail policies of `guardrail-agent`.
//!
//! * [`AddSecurityHeaders`] (`addSecurityHeaders`): fixed headers on responses (or requests).
//! * [`PromptInjectionGuard`] (`promptInjectionGuard`): normalises the
//!   prompt (NFKC, confusables, invisible characters, leetspeak, embedded
//!   base64/hex/rot13), then scores it by attack family (instruction
//!   override, persona switch, refusal suppression, system-prompt
//!   exfiltration, role injection, payload smuggling, SQL and command
//!   injection; overrides and requests for the set-up also in nine other
//!   languages, `multilingual`) and by a learned model over the whole
//!   text, each weighted and named in the verdict. On the response side it reads tool output
//!   in windows with families of its own (instructions addressed to the
//!   AI, task takeover, actions on the agent's tools, markdown
//!   exfiltration, misspelled keywords), and MCP `tools/list` results tool
//!   by tool for poisoning (removed from the list, or the list refused).
//!   On the request side, the tool results a model call carries are read
//!   as tool output too, each on its own (`request`), and the tools it
//!   declares are checked for poisoning (`declarations`). A tool
//!   definition's verdict is remembered by its content (`verdicts`).
//!   The detector's patterns and the poisoning check's are matched through
//!   `pattern_set`: one Aho–Corasick pass over every pattern's required
//!   prefixes and suffixes names the patterns that may match, and only
//!   those run, each alone (one automaton of all of them slows down on
//!   varied text).
//! * [`PiiRedaction`] (`piiRedaction`): masks e-mails, phone numbers
//!   (confirmed with libphonenumber's metadata, national formats of the
//!   configured regions and international ones), card
//!   numbers (Luhn), US SSNs, IBANs (mod 97) and IPv4 addresses in bodies,
//!   keeping JSON valid.
//! * [`AuditLog`] (`auditLog`): a SHA-256 hash-chained JSON-lines journal,
//!   as KarnEvil9's, with secrets redacted; [`verify_journal`] checks it.

pub mod audit;
mod declarations;
mod detector;
mod extraction;
mod headers;
mod indirect;
mod indirect_patterns;
mod injection;
mod injection_stream;
pub mod learned;
mod metrics;
mod multilingual;
mod pattern_set;
mod phone;
mod pii;
mod pii_json;
mod pii_stream;
pub mod poisoning;
mod redactor;
mod request;
mod response;
mod typos;
mod verdicts;
pub mod windows;

pub use audit::{verify_journal, AuditError, AuditLog, Journal, JournalOptions};
pub use detector::{Detector, Family, FamilyScore, Verdict, Weights};
pub use headers::{parse_header_block, AddSecurityHeaders};
pub use injection::PromptInjectionGuard;
pub use phone::{parse_region, PhoneRegion, DEFAULT_REGIONS};
pub use pii::PiiRedaction;
pub use redactor::{Counts, PiiType, Redactor};

/// Compiles the prompt-injection classifier's and the PII redactor's
/// patterns now. Left to the first request that needs them, the compile
/// holds one of the agent's worker threads meanwhile, and on a busy machine
/// a health check queued behind it missed its 100 ms timeout: the kernel
/// then marked the agent unhealthy and answered 503 for a second. An agent
/// calls this before it serves; a pattern that does not compile is an error
/// at startup rather than on every request.
pub fn compile_patterns() -> Result<(), policy_agents::PolicyError> {
    Detector::shared()?;
    poisoning::compile().map_err(policy_agents::PolicyError::new)?;
    metrics::register_all();
    Redactor::shared()?;
    Ok(())
}
