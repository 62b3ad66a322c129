//! Which approvals were decided, as they are decided: the source of MCP's
//! `notifications/elicitation/complete` (the stream relay of
//! [`crate::tool::stream_relay`] sends one on the session's GET stream).
//!
//! One task per agent follows the approvals' events while somebody
//! listens: woken at once by a decision this agent made, and every
//! [`POLL`] for the ones other agents made in a shared store (Redis). It
//! starts with the first listener, from the newest event then, and sleeps
//! while nobody listens (a listener that comes later also hears of the
//! decisions made meanwhile, while the store keeps their events).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, Mutex, Notify};

use super::Approvals;

/// How often the events are read when no decision of this agent's woke
/// the task first.
pub const POLL: Duration = Duration::from_millis(250);
/// Decisions a slow listener may fall behind by before it misses some.
const BACKLOG: usize = 256;

/// A decided approval, as a completion notice needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The approval's id (the elicitation's).
    pub id: String,
    /// The session of the call it was for.
    pub session: String,
    /// The endpoint of that call (authority and path).
    pub endpoint: String,
}

/// The decisions of one agent's approvals, to whoever listens.
pub struct Notices {
    approvals: Arc<Approvals>,
    tx: broadcast::Sender<Arc<Decided>>,
    started: Mutex<bool>,
    listener: Notify,
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notices").finish_non_exhaustive()
    }
}

impl Notices {
    /// The notices of `approvals`.
    pub fn new(approvals: Arc<Approvals>) -> Arc<Notices> {
        let (tx, _) = broadcast::channel(BACKLOG);
        Arc::new(Notices {
            approvals,
            tx,
            started: Mutex::new(false),
            listener: Notify::new(),
        })
    }

    /// The decisions made from now on (the first call starts the task
    /// that reads them, from the newest event).
    pub async fn subscribe(self: &Arc<Self>) -> broadcast::Receiver<Arc<Decided>> {
        let rx = self.tx.subscribe();
        let mut started = self.started.lock().await;
        if !*started {
            // Unreadable now: the task reads it when it can.
            let from = self.approvals.last_event_id().await.ok();
            tokio::spawn(self.clone().run(from));
            *started = true;
        }
        self.listener.notify_one();
        rx
    }

    async fn run(self: Arc<Self>, from: Option<u64>) {
        let mut last = from;
        let mut failing = false;
        loop {
            if self.tx.receiver_count() == 0 {
                self.listener.notified().await;
                continue;
            }
            let Some(after) = last else {
                match self.approvals.last_event_id().await {
                    Ok(n) => last = Some(n),
                    Err(e) => {
                        failing = report(failing, &e.message);
                        tokio::time::sleep(POLL).await;
                    }
                }
                continue;
            };
            let woken = self.approvals.changed();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.approvals.events_since(after).await {
                Ok(Some(events)) => {
                    failing = false;
                    for e in events {
                        last = Some(e.id.max(last.unwrap_or(0)));
                        if e.kind != "approval.decided" {
                            continue;
                        }
                        let text = |k: &str| e.data.get(k).and_then(|v| v.as_str()).map(String::from);
                        if let (Some(id), Some(session), Some(endpoint)) =
                            (text("id"), text("session"), text("endpoint"))
                        {
                            let _ = self.tx.send(Arc::new(Decided { id, session, endpoint }));
                        }
                    }
                }
                // Some were dropped before they were read: go on from the
                // newest (their listeners learn by retrying, as without
                // notices).
                Ok(None) => {
                    tracing::warn!("approval events were dropped before completion notices were sent for them");
                    last = None;
                    continue;
                }
                Err(e) => failing = report(failing, &e.message),
            }
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

/// Logs a failure to read the events once per run of failures.
fn report(failing: bool, why: &str) -> bool {
    if !failing {
        tracing::warn!(error = why, "reading approval events for completion notices");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::tests::{binding, decide, pending_id, terms, who};
    use crate::approvals::{GrantKind, Limits};
    use serde_json::json;

    async fn pending(a: &Approvals, session: Option<&str>) -> String {
        let args = json!({"session": session});
        pending_id(&a.check(binding(&args, session), &args, "r", &terms()).await.unwrap())
    }

    #[tokio::test]
    async fn a_decision_reaches_listeners_with_its_session() {
        let a = Approvals::memory(Limits::default());
        let n = Notices::new(a.clone());
        let mut rx = n.subscribe().await;
        let id = pending(&a, Some("s-1")).await;
        a.decide(&id, &who("bob", &["approver"]), decide(GrantKind::AllowOnce), None)
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            *got,
            Decided {
                id,
                session: "s-1".into(),
                endpoint: "gw/mcp".into()
            }
        );
    }

    #[tokio::test]
    async fn only_decisions_of_calls_in_a_session_are_told() {
        let a = Approvals::memory(Limits::default());
        let n = Notices::new(a.clone());
        let mut rx = n.subscribe().await;
        let approver = who("bob", &["approver"]);
        let without = pending(&a, None).await;
        a.decide(&without, &approver, decide(GrantKind::Deny), None)
            .await
            .unwrap();
        let with = pending(&a, Some("s-2")).await;
        a.decide(&with, &approver, decide(GrantKind::Deny), None).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.id, with, "the call without a session has no stream to be told on");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_another_agent_made_in_redis_is_heard() {
        let Some(server) = crate::approvals::redis_tests::redis() else {
            return;
        };
        let here = Approvals::redis(&server.url, Limits::default()).await.unwrap();
        let there = Approvals::redis(&server.url, Limits::default()).await.unwrap();
        let n = Notices::new(here.clone());
        let mut rx = n.subscribe().await;
        let id = pending(&here, Some("s-3")).await;
        there
            .decide(&id, &who("bob", &["approver"]), decide(GrantKind::AllowSession), None)
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((got.id.as_str(), got.session.as_str()), (id.as_str(), "s-3"));
    }
}
