//! `auditLog`: one JSON line per request in a hash-chained journal.
//!
//! In the response phase a line holds the request and the response (the
//! body too with `log_response_body: true`); in the request phase, the
//! request. Credentials are redacted ([`record`]). The journal path is the
//! agent's default (`--audit-path` / `--audit-dir`) unless the `path` param
//! overrides it; a relative `path` is taken inside the default's directory.
//! A streamed response is recorded at its end, with the count, size and
//! SHA-256 of its events (`stream`).

mod digest;
mod journal;
pub mod record;
mod stream;
mod verify;

pub use digest::RunningSha256;

pub use journal::{Journal, JournalOptions, GENESIS};
pub use verify::verify_journal;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Mutex;

use policy_agents::{
    describe, ChunkContext, ChunkOutcome, FromParams, ParamError, Params, Policy, PolicyError, RequestContext,
    RequestOutcome, ResponseContext, ResponseOutcome,
};

/// A journal failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    /// Reading or writing the file failed.
    #[error("audit journal {0}: {1}")]
    Io(PathBuf, String),
    /// The journal's last line cannot be read, so the chain cannot continue.
    #[error("audit journal {0} is corrupt ({1}); check it with `guardrail-agent verify-audit`")]
    Corrupt(PathBuf, String),
    /// The writer task is gone.
    #[error("audit journal {0} is closed")]
    Closed(PathBuf),
    /// The chain is broken at `line` (1-based).
    #[error("{path}: chain broken at line {line}: {reason}")]
    Broken {
        /// The file.
        path: PathBuf,
        /// The first bad line.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<AuditError> for PolicyError {
    fn from(e: AuditError) -> Self {
        PolicyError::new(e.to_string())
    }
}

/// Parameters of `auditLog`.
#[derive(Debug, Clone)]
pub struct AuditParams {
    log_response_body: bool,
    path: Option<PathBuf>,
}

impl FromParams for AuditParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        Ok(AuditParams {
            log_response_body: p.bool_or("log_response_body", false)?,
            path: p
                .get("path")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// The `auditLog` policy: journals opened on first use, one per path.
pub struct AuditLog {
    default_path: PathBuf,
    options: JournalOptions,
    journals: Mutex<HashMap<PathBuf, Arc<Journal>>>,
}

impl AuditLog {
    /// A policy writing to `default_path` unless a route says otherwise.
    pub fn new(default_path: impl Into<PathBuf>, options: JournalOptions) -> Self {
        AuditLog {
            default_path: default_path.into(),
            options,
            journals: Mutex::new(HashMap::new()),
        }
    }

    fn resolve(&self, param: Option<&Path>) -> PathBuf {
        match param {
            None => self.default_path.clone(),
            Some(p) if p.is_absolute() => p.to_path_buf(),
            Some(p) => self.default_path.parent().unwrap_or(Path::new(".")).join(p),
        }
    }

    /// The journal for `path`, opened if needed.
    pub async fn journal(&self, path: &Path) -> Result<Arc<Journal>, AuditError> {
        let mut journals = self.journals.lock().await;
        if let Some(j) = journals.get(path) {
            return Ok(Arc::clone(j));
        }
        let journal = Arc::new(Journal::open(path, self.options).await?);
        tracing::info!(path = %path.display(), "audit journal opened");
        journals.insert(path.to_path_buf(), Arc::clone(&journal));
        Ok(journal)
    }

    /// Forces every open journal to disk.
    pub async fn sync_all(&self) -> Result<(), AuditError> {
        let journals: Vec<_> = self.journals.lock().await.values().cloned().collect();
        for j in journals {
            j.sync().await?;
        }
        Ok(())
    }
}

impl Policy for AuditLog {
    type Params = AuditParams;
    describe! { name: "auditLog", params: &["log_response_body", "path"], phases: Both, body: true, streams: true }

    async fn on_request(&self, params: &AuditParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let record = record::request_record(&ctx.request, ctx.call, ctx.metadata);
        let journal = self.journal(&self.resolve(params.path.as_deref())).await?;
        let seq = journal.append(record).await?;
        Ok(RequestOutcome::proceed().set_metadata("audit_seq", seq.to_string()))
    }

    async fn on_response(
        &self,
        params: &AuditParams,
        ctx: &ResponseContext<'_>,
    ) -> Result<ResponseOutcome, PolicyError> {
        let mut record = record::request_record(&ctx.request, ctx.call, ctx.metadata);
        let secrets = record::secret_values(&ctx.request);
        record::add_response(&mut record, &ctx.response, params.log_response_body, &secrets);
        let journal = self.journal(&self.resolve(params.path.as_deref())).await?;
        let seq = journal.append(record).await?;
        Ok(ResponseOutcome::proceed().set_metadata("audit_seq", seq.to_string()))
    }

    async fn on_response_chunk(
        &self,
        params: &AuditParams,
        ctx: &ChunkContext<'_>,
    ) -> Result<ChunkOutcome, PolicyError> {
        let step = stream::step(ctx, params.log_response_body)?;
        let out = ChunkOutcome::pass().state(step.state);
        let Some(record) = step.record else {
            return Ok(out);
        };
        let journal = self.journal(&self.resolve(params.path.as_deref())).await?;
        let seq = journal.append(record).await?;
        Ok(out.set_metadata("audit_seq", seq.to_string()))
    }

    async fn on_shutdown(&self) {
        let journals: Vec<_> = self.journals.lock().await.drain().map(|(_, j)| j).collect();
        for j in journals {
            j.close().await;
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
