//! The fleet's history, kept in the store beside the routes: each version
//! records the route slots it changed, before and after. The routes of an
//! older version are the current slots with the later changes undone, so a
//! version stays readable (and restorable) as long as it is among the last
//! `management.history`, whatever etcd compacted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::RoutePolicy;

/// The store's changes on top of the file, by route name: a route, or
/// `None` for a route deleted through the API.
pub type Overrides = BTreeMap<String, Option<RoutePolicy>>;

/// One route's slot in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// No change stored: the file's route (if any) is in force.
    Unset,
    /// Deleted through the API.
    Deleted,
    /// Put through the API.
    Route(Box<RoutePolicy>),
}

impl Slot {
    /// The slot of `name` in `overrides`.
    pub fn of(overrides: &Overrides, name: &str) -> Self {
        match overrides.get(name) {
            None => Slot::Unset,
            Some(None) => Slot::Deleted,
            Some(Some(r)) => Slot::Route(Box::new(r.clone())),
        }
    }

    /// Sets this slot of `name` in `overrides`.
    pub fn set(&self, overrides: &mut Overrides, name: &str) {
        match self {
            Slot::Unset => {
                overrides.remove(name);
            }
            Slot::Deleted => {
                overrides.insert(name.to_string(), None);
            }
            Slot::Route(r) => {
                overrides.insert(name.to_string(), Some((**r).clone()));
            }
        }
    }
}

/// One route changed by a version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The route's name.
    pub route: String,
    /// Its slot before.
    pub before: Slot,
    /// Its slot after.
    pub after: Slot,
}

/// One version as stored (`<prefix>history/<seq>`). Its number is the etcd
/// revision that wrote it (the key's create revision), which is also the
/// `head` key's revision at that point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Position in the fleet's history, +1 per version.
    pub seq: u64,
    /// The token's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When, RFC 3339 (UTC).
    pub time: String,
    /// What changed, in a line.
    pub summary: String,
    /// SHA-256 (hex) of the routes in force after it, on the kernel that
    /// took the write.
    pub hash: String,
    /// The routes it changed.
    pub steps: Vec<Step>,
}

/// The overrides in force at `version`: `current` with every entry newer
/// than `version` undone, newest first. `entries` are `(version, entry)`,
/// oldest first. `None` when `version` is not among them.
pub fn overrides_at(current: &Overrides, entries: &[(u64, Entry)], version: u64) -> Option<Overrides> {
    if !entries.iter().any(|(v, _)| *v == version) {
        return None;
    }
    let mut out = current.clone();
    for (_, e) in entries.iter().rev().take_while(|(v, _)| *v > version) {
        for s in e.steps.iter().rev() {
            s.before.set(&mut out, &s.route);
        }
    }
    Some(out)
}

/// The steps that turn `current` into `target`, by route name.
pub fn steps_between(current: &Overrides, target: &Overrides) -> Vec<Step> {
    let names: std::collections::BTreeSet<&String> = current.keys().chain(target.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let before = Slot::of(current, name);
            let after = Slot::of(target, name);
            (before != after).then(|| Step {
                route: name.clone(),
                before,
                after,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, policy: &str) -> RoutePolicy {
        serde_json::from_value(serde_json::json!({
            "route_name": name,
            "request_policy_chain": [{"policy": policy}],
        }))
        .unwrap()
    }

    fn entry(seq: u64, steps: Vec<Step>) -> Entry {
        Entry {
            seq,
            token: None,
            time: String::new(),
            summary: String::new(),
            hash: String::new(),
            steps,
        }
    }

    #[test]
    fn older_versions_are_the_current_slots_with_later_steps_undone() {
        let mut now = Overrides::new();
        let v1 = Overrides::new();
        let mut v2 = v1.clone();
        v2.insert("a".into(), Some(route("a", "p1")));
        let mut v3 = v2.clone();
        v3.insert("a".into(), Some(route("a", "p2")));
        v3.insert("b".into(), None);
        let mut v4 = v3.clone();
        v4.remove("a");
        let entries = vec![
            (10, entry(1, steps_between(&Overrides::new(), &v1))),
            (12, entry(2, steps_between(&v1, &v2))),
            (15, entry(3, steps_between(&v2, &v3))),
            (19, entry(4, steps_between(&v3, &v4))),
        ];
        now.clone_from(&v4);
        assert_eq!(overrides_at(&now, &entries, 19).unwrap(), v4);
        assert_eq!(overrides_at(&now, &entries, 15).unwrap(), v3);
        assert_eq!(overrides_at(&now, &entries, 12).unwrap(), v2);
        assert_eq!(overrides_at(&now, &entries, 10).unwrap(), v1);
        assert!(overrides_at(&now, &entries, 11).is_none(), "not a version");
        let back = steps_between(&v4, &v2);
        let mut restored = v4.clone();
        for s in &back {
            s.after.set(&mut restored, &s.route);
        }
        assert_eq!(restored, v2);
        let json = serde_json::to_string(&entries[2].1).unwrap();
        assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), entries[2].1);
    }
}
