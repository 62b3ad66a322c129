//! An append-only JSON-lines journal with a SHA-256 hash chain, as
//! KarnEvil9's: every line carries `seq`, `hash_prev` (the previous line's
//! `hash`, 64 zeros for the first) and its own `hash`, the SHA-256 of the
//! line's JSON without the `hash` field (which is always last).
//!
//! One background task per file owns it: callers send records through a
//! channel and wait until their line is written; fsync happens in batches,
//! every `fsync_every` lines or `fsync_interval`, whichever comes first.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::AuditError;

/// `hash_prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// When lines are forced to disk.
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    /// fsync after this many lines...
    pub fsync_every: usize,
    /// ...or this long after the first unsynced line.
    pub fsync_interval: Duration,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            fsync_every: 64,
            fsync_interval: Duration::from_millis(50),
        }
    }
}

enum Command {
    Append(Map<String, Value>, oneshot::Sender<Result<u64, String>>),
    Sync(oneshot::Sender<Result<(), String>>),
}

/// The chain's head: last sequence number and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) seq: u64,
    pub(crate) hash: String,
}

/// The hash of a line: SHA-256 of its JSON without the trailing `hash` field.
pub(crate) fn line_hash(body_without_hash: &str) -> String {
    hex::encode(Sha256::digest(body_without_hash.as_bytes()))
}

/// Turns a record into a chained line (with `\n`) and advances the head.
fn seal(head: &mut Head, mut record: Map<String, Value>) -> Result<String, String> {
    record.remove("hash");
    record.insert("seq".into(), Value::from(head.seq + 1));
    record.insert("hash_prev".into(), Value::from(head.hash.clone()));
    let body = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    let hash = line_hash(&body);
    let open = body.strip_suffix('}').ok_or("record is not a JSON object")?;
    let line = format!("{open},\"hash\":\"{hash}\"}}\n");
    head.seq += 1;
    head.hash = hash;
    Ok(line)
}

/// Reads the head of an existing journal, cutting off a torn last line.
async fn read_head(path: &Path) -> Result<Head, AuditError> {
    let io = |e: std::io::Error| AuditError::Io(path.to_path_buf(), e.to_string());
    let data = match tokio::fs::read(path).await {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(e)),
    };
    let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if complete < data.len() {
        tracing::warn!(path = %path.display(), bytes = data.len() - complete, "cutting a torn last journal line");
        let file = tokio::fs::OpenOptions::new().write(true).open(path).await.map_err(io)?;
        file.set_len(complete as u64).await.map_err(io)?;
        file.sync_all().await.map_err(io)?;
    }
    let Some(last) = data[..complete].split(|b| *b == b'\n').rev().find(|l| !l.is_empty()) else {
        return Ok(Head {
            seq: 0,
            hash: GENESIS.to_string(),
        });
    };
    let doc: Value =
        serde_json::from_slice(last).map_err(|e| AuditError::Corrupt(path.to_path_buf(), e.to_string()))?;
    let seq = doc.get("seq").and_then(Value::as_u64);
    let hash = doc.get("hash").and_then(Value::as_str);
    match (seq, hash) {
        (Some(seq), Some(hash)) => Ok(Head {
            seq,
            hash: hash.to_string(),
        }),
        _ => Err(AuditError::Corrupt(
            path.to_path_buf(),
            "last line has no seq or hash".into(),
        )),
    }
}

/// A journal file and its writer task.
pub struct Journal {
    path: PathBuf,
    tx: mpsc::Sender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Journal {
    /// Opens (or creates, with mode 0640 and parent directories) `path`,
    /// continuing its chain.
    pub async fn open(path: &Path, options: JournalOptions) -> Result<Journal, AuditError> {
        let io = |e: std::io::Error| AuditError::Io(path.to_path_buf(), e.to_string());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(io)?;
        }
        let head = read_head(path).await?;
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)
            .await
            .map_err(io)?;
        let (tx, rx) = mpsc::channel(4096);
        let task = tokio::spawn(writer(file, rx, head, options, path.to_path_buf()));
        Ok(Journal {
            path: path.to_path_buf(),
            tx,
            task: Mutex::new(Some(task)),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a record once written (not yet fsynced); returns its `seq`.
    pub async fn append(&self, record: Map<String, Value>) -> Result<u64, AuditError> {
        let (ack, done) = oneshot::channel();
        let closed = || AuditError::Closed(self.path.clone());
        self.tx.send(Command::Append(record, ack)).await.map_err(|_| closed())?;
        done.await
            .map_err(|_| closed())?
            .map_err(|e| AuditError::Io(self.path.clone(), e))
    }

    /// Forces everything appended so far to disk.
    pub async fn sync(&self) -> Result<(), AuditError> {
        let (ack, done) = oneshot::channel();
        let closed = || AuditError::Closed(self.path.clone());
        self.tx.send(Command::Sync(ack)).await.map_err(|_| closed())?;
        done.await
            .map_err(|_| closed())?
            .map_err(|e| AuditError::Io(self.path.clone(), e))
    }

    /// Syncs and stops the writer task.
    pub async fn close(&self) {
        if let Err(e) = self.sync().await {
            tracing::warn!(path = %self.path.display(), error = %e, "final journal sync failed");
        }
        if let Some(task) = self.task.lock().await.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

async fn writer(
    mut file: tokio::fs::File,
    mut rx: mpsc::Receiver<Command>,
    mut head: Head,
    options: JournalOptions,
    path: PathBuf,
) {
    let mut unsynced = 0usize;
    let mut sync_by = Instant::now();
    loop {
        let cmd = if unsynced > 0 {
            tokio::select! {
                cmd = rx.recv() => cmd,
                () = tokio::time::sleep_until(sync_by) => Some(Command::Sync(oneshot::channel().0)),
            }
        } else {
            rx.recv().await
        };
        let Some(cmd) = cmd else { break };
        let mut batch = vec![cmd];
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let mut buf = String::new();
        let mut acks = Vec::new();
        let mut syncs = Vec::new();
        for cmd in batch {
            match cmd {
                Command::Append(record, ack) => match seal(&mut head, record) {
                    Ok(line) => {
                        buf.push_str(&line);
                        acks.push((ack, head.seq));
                    }
                    Err(e) => {
                        let _ = ack.send(Err(e));
                    }
                },
                Command::Sync(ack) => syncs.push(ack),
            }
        }
        if !buf.is_empty() {
            if unsynced == 0 {
                sync_by = Instant::now() + options.fsync_interval;
            }
            // tokio's `write_all` returns once the bytes are in its own
            // buffer; `flush` waits until the OS has them (or reports the
            // failure), so an acknowledged line is in the file.
            let written = match file.write_all(buf.as_bytes()).await {
                Ok(()) => file.flush().await,
                Err(e) => Err(e),
            }
            .map_err(|e| e.to_string());
            if let Err(e) = &written {
                tracing::error!(path = %path.display(), error = %e, "audit journal write failed");
            }
            unsynced += acks.len();
            for (ack, seq) in acks {
                let _ = ack.send(written.clone().map(|()| seq));
            }
        }
        let due = unsynced >= options.fsync_every || (unsynced > 0 && Instant::now() >= sync_by);
        if !syncs.is_empty() || due {
            let synced = file.sync_data().await.map_err(|e| e.to_string());
            if let Err(e) = &synced {
                tracing::error!(path = %path.display(), error = %e, "audit journal fsync failed");
            }
            unsynced = 0;
            for ack in syncs {
                let _ = ack.send(synced.clone());
            }
        }
    }
    let _ = file.sync_data().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_lines_chain_and_hash_their_body() {
        let mut head = Head {
            seq: 0,
            hash: GENESIS.to_string(),
        };
        let mut rec = Map::new();
        rec.insert("a".into(), Value::from("x"));
        let line = seal(&mut head, rec.clone()).unwrap();
        let doc: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(doc["seq"], 1);
        assert_eq!(doc["hash_prev"], GENESIS);
        assert_eq!(doc["hash"], head.hash.as_str());
        assert!(line.ends_with(&format!(",\"hash\":\"{}\"}}\n", head.hash)));
        let second: Value = serde_json::from_str(&seal(&mut head, rec).unwrap()).unwrap();
        assert_eq!(second["hash_prev"], doc["hash"]);
    }
}
