//! Notifications: an `approve` rule's requests and decisions announced
//! where approvers work (`approval.notify`), as signed webhooks or chat
//! messages, off the held call's path.
//!
//! The agent whose operation made an event announces it (a request made,
//! decided, expired, consumed or revoked; in a shared store, the one agent
//! whose script made the change), so each event is announced once however
//! many agents share the store. What a notification says is in
//! [`payload`]; how it is sent, signed and retried in [`deliver`]; the
//! targets' terms in [`target`].

pub mod deliver;
pub mod payload;
pub mod target;

pub use target::{Format, Target};

use super::store::Approval;

/// Announces event `kind` (`approval.requested`, ...) about `a` to each of
/// its rule's targets that hears it.
pub fn announce(kind: &'static str, a: &Approval, now_ms: u64) {
    let event = payload::short(kind);
    for (i, t) in a.terms.notify.iter().enumerate() {
        if !t.hears(event) {
            continue;
        }
        let link = payload::link(t.page.as_deref(), a);
        // One name per event and target, the same on every retry.
        let delivery = format!("{}.{event}.{}.{i}", a.id, a.version);
        let body = payload::body(t.format, kind, a, &link, &delivery, now_ms);
        deliver::send(deliver::Outgoing {
            target: t.clone(),
            event: kind,
            delivery,
            body: body.to_string().into_bytes(),
        });
    }
}

#[cfg(test)]
mod tests;
