//! Parsed params, kept per distinct raw value: rules and constraints are
//! parsed and their globs compiled once, not on every call. Errors are not
//! kept, so a bad param fails (and is logged) on every call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use policy_agents::{ParamError, Params};

/// Distinct param sets kept at most (routes × policies); beyond, the cache starts over.
const MAX_ENTRIES: usize = 256;

/// A cache of parsed params.
#[derive(Debug)]
pub struct ParamCache<T> {
    keys: &'static [&'static str],
    map: Mutex<HashMap<String, Arc<T>>>,
}

impl<T> ParamCache<T> {
    /// A cache keyed on the raw values of `keys`.
    pub fn new(keys: &'static [&'static str]) -> Self {
        ParamCache {
            keys,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The parsed params, from the cache or from `parse`.
    pub fn get(
        &self,
        params: &Params,
        parse: impl FnOnce(&Params) -> Result<T, ParamError>,
    ) -> Result<Arc<T>, ParamError> {
        let mut key = String::new();
        for k in self.keys {
            match params.get(k) {
                Some(v) => {
                    key.push('1');
                    key.push_str(&v.len().to_string());
                    key.push(':');
                    key.push_str(v);
                }
                None => key.push('0'),
            }
        }
        if let Some(hit) = self.map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(Arc::clone(hit));
        }
        let parsed = Arc::new(parse(params)?);
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Calls that parsed the same params at once all get the first one
        // kept, so that state built with the params (a route's rate limit)
        // is one per param set.
        if let Some(first) = map.get(&key) {
            return Ok(Arc::clone(first));
        }
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(key, Arc::clone(&parsed));
        Ok(parsed)
    }
}
