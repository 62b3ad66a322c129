//! Checking a journal's hash chain (`guardrail-agent verify-audit PATH`).

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use super::journal::{line_hash, GENESIS};
use super::AuditError;

fn check_line(line: &str, prev_hash: &str, prev_seq: u64) -> Result<(String, u64), String> {
    let doc: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let hash = doc.get("hash").and_then(Value::as_str).ok_or("no hash field")?;
    let hash_prev = doc
        .get("hash_prev")
        .and_then(Value::as_str)
        .ok_or("no hash_prev field")?;
    let seq = doc.get("seq").and_then(Value::as_u64).ok_or("no seq field")?;
    let suffix = format!(",\"hash\":\"{hash}\"}}");
    let body = line.strip_suffix(&suffix).ok_or("hash is not the last field")?;
    if line_hash(&format!("{body}}}")) != hash {
        return Err("hash mismatch: the line was altered".into());
    }
    if hash_prev != prev_hash {
        return Err("hash_prev does not match the previous line: a line was removed, inserted or reordered".into());
    }
    if seq != prev_seq + 1 {
        return Err(format!("seq {seq} does not follow {prev_seq}"));
    }
    Ok((hash.to_string(), seq))
}

/// Verifies the chain of the journal at `path`; the number of lines when intact,
/// [`AuditError::Broken`] naming the first bad line otherwise.
pub fn verify_journal(path: &Path) -> Result<u64, AuditError> {
    let io = |e: std::io::Error| AuditError::Io(path.to_path_buf(), e.to_string());
    let file = std::fs::File::open(path).map_err(io)?;
    let mut prev_hash = GENESIS.to_string();
    let mut prev_seq = 0u64;
    let mut count = 0u64;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        let number = i as u64 + 1;
        let (hash, seq) = check_line(&line, &prev_hash, prev_seq).map_err(|reason| AuditError::Broken {
            path: path.to_path_buf(),
            line: number,
            reason,
        })?;
        prev_hash = hash;
        prev_seq = seq;
        count = number;
    }
    Ok(count)
}
