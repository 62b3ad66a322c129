//! The watch loop: every store revision under the prefix is applied once,
//! in order. After a disconnect the watch resumes from the revision after
//! the last one applied; when etcd has compacted it, the store is read in
//! full instead, so no change is skipped.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};

use super::etcd::{self, Key};
use super::Fleet;

/// How a watch ended.
enum End {
    /// The revision to resume from was compacted: read in full, at once.
    Compacted,
    /// The store went away (or never came): wait, then retry.
    Lost(String),
}

/// Watches the store until the process ends.
pub(super) async fn run(fleet: Arc<Fleet>) {
    let ticker = {
        let status = fleet.status.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                status.tick();
            }
        })
    };
    let mut full_read = fleet.view.lock().await.revision == 0;
    let mut backoff = Duration::from_millis(100);
    loop {
        if full_read {
            match fleet.read_in_full().await {
                Ok(()) => full_read = false,
                Err(reason) => {
                    fleet.lost(&reason).await;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
        }
        match fleet.follow(&mut backoff).await {
            End::Compacted => full_read = true,
            End::Lost(reason) => {
                fleet.lost(&reason).await;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
        if Arc::strong_count(&fleet) == 1 {
            break;
        }
    }
    ticker.abort();
}

impl Fleet {
    async fn lost(&self, reason: &str) {
        if self.status.watching() {
            tracing::error!(
                reason,
                "configuration store watch lost: the routes in force stay, writes get 503 until it is back"
            );
            self.status.set_watching(false);
            // The cache records when the routes were last known current, for
            // a restart while the store is away.
            let view = self.view.lock().await;
            self.save_cache(&view);
        } else {
            tracing::debug!(reason, "configuration store still unreachable");
            self.status.set_watching(false);
        }
    }

    /// Reads the whole store and applies it when it differs from the view.
    async fn read_in_full(&self) -> Result<(), String> {
        let mut client = self.client().await?;
        let read = etcd::read_all(&mut client, &self.keys)
            .await
            .map_err(|e| e.to_string())?;
        let mut view = self.view.lock().await;
        let changed = read.overrides != view.overrides || read.version != view.version;
        view.take(read);
        self.status.full_read(view.revision, view.version);
        tracing::info!(
            version = view.version,
            revision = view.revision,
            changed,
            "configuration store read in full"
        );
        if changed {
            self.apply_view(&view, "full read").await;
        }
        self.applied.send_replace((view.revision, view.version));
        self.save_cache(&view);
        Ok(())
    }

    /// Watches from the revision after the view's until the watch ends.
    async fn follow(&self, backoff: &mut Duration) -> End {
        let mut client = match self.client().await {
            Ok(c) => c,
            Err(e) => return End::Lost(e),
        };
        let from = self.view.lock().await.revision + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from as i64)
            .with_progress_notify();
        let mut stream = match client.watch(self.keys.prefix(), Some(options)).await {
            Ok(s) => s,
            Err(e) => return End::Lost(e.to_string()),
        };
        // The watch counts as up once it has delivered the fleet's version
        // as a linearizable read gives it now: a member that is behind
        // the cluster watches, but is not in sync until it caught up. A
        // progress note (answered once the watch is in sync) wakes the
        // loop when there is nothing to catch up; a compacted start is
        // reported before it.
        let target = match etcd::head_version(&mut client, &self.keys).await {
            Ok(v) => v,
            Err(e) => return End::Lost(e.to_string()),
        };
        if let Err(e) = stream.request_progress().await {
            return End::Lost(e.to_string());
        }
        loop {
            let resp = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return End::Lost("the watch stream ended".into()),
                Err(e) => return End::Lost(e.to_string()),
            };
            if resp.compact_revision() > 0 {
                tracing::warn!(
                    from,
                    compacted_through = resp.compact_revision(),
                    "configuration store compacted past the revision to resume from: reading it in full"
                );
                return End::Compacted;
            }
            if resp.canceled() {
                return End::Lost(format!("watch canceled: {}", resp.cancel_reason()));
            }
            if resp.created() {
                continue;
            }
            self.apply_events(resp.events()).await;
            if !self.status.watching() && self.view.lock().await.version >= target {
                tracing::info!(from, version = target, "configuration store watched, in sync");
                self.status.set_watching(true);
                *backoff = Duration::from_millis(100);
            }
        }
    }

    /// Applies the events of a watch answer, one store revision at a time;
    /// revisions already applied are skipped.
    async fn apply_events(&self, events: &[etcd_client::Event]) {
        let mut view = self.view.lock().await;
        let mut i = 0;
        while i < events.len() {
            let rev = events[i].kv().map_or(0, |kv| kv.mod_revision()) as u64;
            let end = events[i..]
                .iter()
                .position(|e| e.kv().map_or(0, |kv| kv.mod_revision()) as u64 != rev)
                .map_or(events.len(), |n| i + n);
            let group = &events[i..end];
            i = end;
            if rev <= view.revision {
                continue;
            }
            for e in group {
                let Some(kv) = e.kv() else { continue };
                match (self.keys.parse(kv.key()), e.event_type()) {
                    (Key::Route(name), EventType::Put) => {
                        view.overrides
                            .insert(name.to_string(), etcd::slot_of(name, kv.value(), rev));
                    }
                    (Key::Route(name), EventType::Delete) => {
                        view.overrides.remove(name);
                    }
                    (Key::Head, EventType::Put) => {
                        view.version = rev;
                        view.seq = serde_json::from_slice::<etcd::Head>(kv.value()).map_or(view.seq, |h| h.seq);
                    }
                    (Key::Head, EventType::Delete) => {
                        view.version = 0;
                        view.seq = 0;
                    }
                    _ => {}
                }
            }
            view.revision = rev;
            self.apply_view(&view, "watch").await;
            self.status.applied(view.revision, view.version);
            self.applied.send_replace((view.revision, view.version));
            self.save_cache(&view);
        }
    }
}
