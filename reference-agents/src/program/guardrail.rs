//! `guardrail-agent`: `addSecurityHeaders`, `promptInjectionGuard`,
//! `piiRedaction` and `auditLog`; `guardrail-agent verify-audit PATH` checks
//! an audit journal's hash chain.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::guardrail::{
    compile_patterns, verify_journal, AddSecurityHeaders, AuditError, AuditLog, JournalOptions, PiiRedaction,
    PromptInjectionGuard,
};
use clap::{Parser, Subcommand};
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::Agent;

/// Flags of `guardrail-agent`.
#[derive(Parser)]
#[command(
    name = "guardrail-agent",
    version,
    about = "Policy agent for guardrails: addSecurityHeaders, promptInjectionGuard, piiRedaction, auditLog",
    args_conflicts_with_subcommands = true
)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/guardrail.sock")]
    socket: PathBuf,
    /// Default audit journal (the `path` param of auditLog overrides it).
    #[arg(long, value_name = "FILE", conflicts_with = "audit_dir")]
    audit_path: Option<PathBuf>,
    /// Directory of the default audit journal (`DIR/audit.jsonl`).
    #[arg(long, value_name = "DIR", default_value = "/var/log/policy-engine")]
    audit_dir: PathBuf,
    /// fsync the journal after this many lines...
    #[arg(long, value_name = "LINES", default_value_t = 64)]
    audit_fsync_lines: usize,
    /// ...or this many milliseconds after the first unsynced line.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    audit_fsync_ms: u64,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Check the hash chain of an audit journal; names the first broken line
    /// and exits non-zero when it is broken.
    VerifyAudit {
        /// The journal file.
        path: PathBuf,
    },
}

fn verify(path: &std::path::Path) -> ExitCode {
    match verify_journal(path) {
        Ok(lines) => {
            println!("ok: {} ({lines} lines, chain intact)", path.display());
            ExitCode::SUCCESS
        }
        Err(e @ AuditError::Broken { .. }) => {
            eprintln!("BROKEN: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs `guardrail-agent` with `args` (its name first).
pub fn main(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    if let Some(Command::VerifyAudit { path }) = &args.command {
        return Ok(verify(path));
    }
    args.serve.runtime()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_tracing(args.serve.log_json);
    if args.audit_fsync_lines == 0 {
        anyhow::bail!("--audit-fsync-lines must be at least 1");
    }
    let audit_path = args
        .audit_path
        .clone()
        .unwrap_or_else(|| args.audit_dir.join("audit.jsonl"));
    let options = JournalOptions {
        fsync_every: args.audit_fsync_lines,
        fsync_interval: Duration::from_millis(args.audit_fsync_ms),
    };
    tracing::info!(audit = %audit_path.display(), "default audit journal");
    compile_patterns().map_err(|e| anyhow::anyhow!("guardrail patterns: {}", e.message()))?;
    let builder = Agent::builder("guardrail-agent", env!("CARGO_PKG_VERSION"))
        .policy(AddSecurityHeaders)
        .policy(PromptInjectionGuard)
        .policy(PiiRedaction)
        .policy(AuditLog::new(audit_path, options));
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(ExitCode::SUCCESS)
}
