//! The tools each request declared, kept from its request phase for its
//! streamed response: the kernel sends a streaming policy the request
//! without its body. Bounded: at most [`MAX_ENTRIES`] requests, each for at
//! most [`TTL`]; the oldest go first. An entry is dropped when its stream ends.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::calls::Declared;

/// Requests kept at most.
pub const MAX_ENTRIES: usize = 4096;

/// How long an entry is kept.
pub const TTL: Duration = Duration::from_secs(600);

#[derive(Default)]
struct Inner {
    map: HashMap<String, (Instant, Arc<Declared>)>,
    order: VecDeque<String>,
}

/// Declared tools by request id.
#[derive(Default)]
pub struct DeclaredStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for DeclaredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclaredStore").finish_non_exhaustive()
    }
}

impl DeclaredStore {
    /// Keeps the tools `request_id` declared.
    pub fn put(&self, request_id: &str, tools: Declared) {
        self.put_at(request_id, tools, Instant::now());
    }

    fn put_at(&self, request_id: &str, tools: Declared, now: Instant) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *g;
        if inner
            .map
            .insert(request_id.to_string(), (now, Arc::new(tools)))
            .is_none()
        {
            inner.order.push_back(request_id.to_string());
        }
        while inner.order.len() > MAX_ENTRIES
            || inner
                .order
                .front()
                .and_then(|k| inner.map.get(k))
                .is_some_and(|(t, _)| now.duration_since(*t) > TTL)
        {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
        // Ids taken out by `take` leave stale order entries behind: drop them.
        while inner.order.front().is_some_and(|k| !inner.map.contains_key(k)) {
            inner.order.pop_front();
        }
    }

    /// The tools `request_id` declared, if kept and not expired.
    pub fn get(&self, request_id: &str) -> Option<Arc<Declared>> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.map
            .get(request_id)
            .filter(|(t, _)| t.elapsed() <= TTL)
            .map(|(_, d)| Arc::clone(d))
    }

    /// Forgets `request_id` (its stream ended).
    pub fn remove(&self, request_id: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.map.remove(request_id);
    }

    /// Requests kept now.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).map.len()
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(name: &str) -> Declared {
        [(name.to_string(), None)].into_iter().collect()
    }

    #[test]
    fn bounded_by_count_and_age() {
        let s = DeclaredStore::default();
        let t0 = Instant::now();
        for i in 0..MAX_ENTRIES + 10 {
            s.put_at(&format!("r{i}"), tools("a"), t0);
        }
        assert_eq!(s.len(), MAX_ENTRIES);
        assert!(s.get("r0").is_none() && s.get(&format!("r{}", MAX_ENTRIES + 9)).is_some());
        // A later insert drops entries older than the TTL.
        s.put_at("late", tools("b"), t0 + TTL + Duration::from_secs(1));
        assert_eq!(s.len(), 1);
        s.remove("late");
        assert!(s.is_empty());
    }
}
