//! Delivery: a bounded queue and one task that posts, off the call's path.
//!
//! A held call never waits for a notification: an event is queued (or,
//! with the queue full, dropped and counted) and the call answered. Each
//! delivery is retried on a connection failure, a timeout, a 429 or a 5xx,
//! with doubling backoff, at most [`ATTEMPTS`] times within [`DEADLINE`];
//! any other answer ends it. At least once: a receiver that answered 2xx
//! after the gateway gave up waiting may hear a delivery twice, with the
//! same `X-Policy-Kernel-Delivery`, which it can use to drop the second.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::{mpsc, Semaphore};

use super::target::Target;

/// Deliveries waiting for the sender, at most.
const QUEUE: usize = 1024;
/// Deliveries in flight, at most.
const IN_FLIGHT: usize = 16;
/// Tries per delivery.
pub const ATTEMPTS: u32 = 5;
/// The first retry's wait; each next one doubles.
const BACKOFF: Duration = Duration::from_millis(500);
/// A delivery gives up after this, whatever its tries.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// One POST gives up after this.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The header carrying the signature: `t=<unix seconds>,v1=<hex>`.
pub const SIGNATURE: &str = "x-policy-kernel-signature";
/// The header naming the event (`approval.requested`, ...).
pub const EVENT: &str = "x-policy-kernel-event";
/// The header naming the delivery (the same on each retry).
pub const DELIVERY: &str = "x-policy-kernel-delivery";

/// One notification to send.
#[derive(Debug)]
pub struct Outgoing {
    /// Where.
    pub target: Target,
    /// `approval.requested`, ...
    pub event: &'static str,
    /// Names this delivery.
    pub delivery: String,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// `t=<at>,v1=<HMAC-SHA256(secret, "<at>.<body>") in hex>`.
pub fn signature(secret: &[u8], at: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(at.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={at},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Queues `o` for sending; never waits (a full queue drops it, counted).
pub fn send(o: Outgoing) {
    let format = o.target.format.as_str();
    if let Err(e) = sender().try_send(o) {
        super::super::metrics::notified(format, "dropped");
        tracing::warn!(error = %e, "approval notification dropped: the delivery queue is full or closed");
    }
}

fn sender() -> &'static mpsc::Sender<Outgoing> {
    static TX: OnceLock<mpsc::Sender<Outgoing>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(rx));
        tx
    })
}

fn client() -> Option<reqwest::Client> {
    static C: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    C.get_or_init(|| {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(TIMEOUT)
            .timeout(TIMEOUT)
            .user_agent(concat!("policy-kernel-approvals/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| tracing::error!(error = %e, "approval notifications: no HTTP client"))
            .ok()
    })
    .clone()
}

async fn run(mut rx: mpsc::Receiver<Outgoing>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(o) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        tokio::spawn(async move {
            deliver(o).await;
            drop(slot);
        });
    }
}

/// Why a try failed, and whether another may succeed.
enum Failure {
    Retry(String, Option<Duration>),
    Final(String),
}

async fn attempt(client: &reqwest::Client, o: &Outgoing, url: &str, secret: Option<&str>) -> Result<(), Failure> {
    let mut req = client
        .post(url)
        .header("content-type", "application/json")
        .header(EVENT, o.event)
        .header(DELIVERY, &o.delivery);
    if let Some(s) = secret {
        let at = super::super::now_ms() / 1000;
        req = req.header(SIGNATURE, signature(s.as_bytes(), at, &o.body));
    }
    match req.body(o.body.clone()).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => {
            let status = r.status();
            let why = format!("the receiver answered {}", status.as_u16());
            if status.is_server_error() || status.as_u16() == 429 {
                let after = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                Err(Failure::Retry(why, after))
            } else {
                Err(Failure::Final(why))
            }
        }
        Err(e) if e.is_timeout() => Err(Failure::Retry("timed out".into(), None)),
        Err(e) if e.is_connect() => Err(Failure::Retry(format!("could not connect: {e}"), None)),
        Err(e) => Err(Failure::Retry(e.to_string(), None)),
    }
}

async fn deliver(o: Outgoing) {
    let format = o.target.format.as_str();
    let host = o.target.host();
    let fail = |why: &str| {
        super::super::metrics::notified(format, "failed");
        tracing::warn!(
            target_host = %host,
            format,
            event = o.event,
            delivery = %o.delivery,
            error = why,
            "approval notification not delivered"
        );
    };
    let (url, secret) = match (o.target.url(), o.target.secret()) {
        (Ok(u), Ok(s)) => (u, s),
        (Err(e), _) | (_, Err(e)) => return fail(&e),
    };
    let Some(client) = client() else {
        return fail("no HTTP client");
    };
    let started = Instant::now();
    let mut wait = BACKOFF;
    for n in 1..=ATTEMPTS {
        let why = match attempt(&client, &o, &url, secret.as_deref()).await {
            Ok(()) => {
                super::super::metrics::notified(format, "delivered");
                return;
            }
            Err(Failure::Final(why)) => return fail(&why),
            Err(Failure::Retry(why, after)) => {
                let pause = after.map_or(wait, |a| a.min(DEADLINE));
                if n == ATTEMPTS || started.elapsed() + pause >= DEADLINE {
                    return fail(&format!("{why} (after {n} tries)"));
                }
                tracing::debug!(target_host = %host, try_no = n, error = %why, "approval notification: retrying");
                super::super::metrics::retried(format);
                pause
            }
        };
        tokio::time::sleep(why).await;
        wait = wait.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_time_and_body() {
        // Python: hmac.new(b"0123456789abcdef", b"1700000000.{}", sha256).
        let s = signature(b"0123456789abcdef", 1_700_000_000, b"{}");
        assert_eq!(
            s,
            "t=1700000000,v1=e4f8e2ecae2295b2ddb2f0b5584c8275e226c0ebe9b3b819e70156bb67122e3e"
        );
    }
}
