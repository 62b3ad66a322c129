//! Writes through the management API: each is checked against `If-Match`,
//! validated structurally and strictly (§4.4), persisted, then applied
//! through [`Kernel::apply`](crate::kernel::Kernel::apply). A refused write
//! changes nothing: neither the routes in force, nor the version, nor the
//! state file.

use hyper::StatusCode;
use serde_json::{json, Value};

use super::auth::Caller;
use super::store::{self, Source, Version};
use super::{count_change, strict, Backend, Management};
use crate::config::{KernelConfig, RoutePolicy};
use crate::kernel::ApplyMode;

/// An error answer: HTTP status, a stable code and a message.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// Machine-readable code.
    pub code: &'static str,
    /// What went wrong, naming the field, route or param.
    pub message: String,
    /// Strict validation's findings, when that is the cause.
    pub errors: Vec<strict::Rejection>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            errors: Vec::new(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if !self.errors.is_empty() {
            v["errors"] = json!(self.errors);
        }
        v
    }
}

/// One write.
#[derive(Debug, Clone)]
pub enum Change {
    /// Create or replace a route.
    Put(Box<RoutePolicy>),
    /// Remove a route.
    Delete(String),
    /// Restore the routes of a stored version.
    Rollback(u64),
}

/// Parses `If-Match`: the version, bare or as a quoted entity tag.
pub fn parse_if_match(value: Option<&[u8]>) -> Result<u64, ApiError> {
    let Some(v) = value else {
        return Err(ApiError::new(
            StatusCode::PRECONDITION_REQUIRED,
            "if_match_required",
            "writes need an If-Match header with the current version (GET /v1/config gives it)",
        ));
    };
    std::str::from_utf8(v)
        .ok()
        .map(|s| s.trim().trim_start_matches("W/").trim_matches('"'))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_if_match",
                "If-Match must be a version number",
            )
        })
}

/// Parses a route from a JSON body; `name` (from the path) fills or must
/// equal its `route_name`.
pub fn parse_route(body: &[u8], name: Option<&str>) -> Result<RoutePolicy, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_route", m);
    let mut value: Value = serde_json::from_slice(body).map_err(|e| bad(format!("body is not JSON: {e}")))?;
    let Some(obj) = value.as_object_mut() else {
        return Err(bad("body must be a JSON object (a route)".into()));
    };
    if let Some(name) = name {
        match obj.get("route_name") {
            None => {
                obj.insert("route_name".into(), Value::String(name.to_string()));
            }
            Some(Value::String(n)) if n == name => {}
            Some(other) => {
                return Err(bad(format!(
                    "route_name {other} differs from the route in the path {name:?}"
                )))
            }
        }
    }
    serde_json::from_value(value).map_err(|e| bad(format!("route: {e}")))
}

/// `config` with `routes`, checked structurally; the error names the field.
fn with_routes(current: &KernelConfig, routes: Vec<RoutePolicy>) -> Result<KernelConfig, ApiError> {
    let mut next = current.clone();
    next.route_policies = routes;
    next.validate("")
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", e.to_string()))?;
    Ok(next)
}

impl Management {
    fn strict_check<'a>(&self, routes: impl IntoIterator<Item = &'a RoutePolicy>) -> Result<(), ApiError> {
        let snap = self.kernel.snapshot();
        let errors: Vec<strict::Rejection> = routes
            .into_iter()
            .flat_map(|r| strict::check_route(r, &snap.agents))
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        let mut e = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
        );
        e.errors = errors;
        Err(e)
    }

    /// Dry run of a route, or of a whole set of routes (`{"route_policies":
    /// [...]}`): the same checks as a write; nothing changes.
    pub fn validate(&self, body: &[u8]) -> Result<Value, ApiError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("body is not JSON: {e}"),
            )
        })?;
        let current = self.kernel.snapshot().config.clone();
        let routes: Vec<RoutePolicy> = match value.get("route_policies") {
            Some(list) => serde_json::from_value(list.clone())
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_route", format!("route_policies: {e}")))?,
            None => vec![parse_route(body, None)?],
        };
        let next = if value.get("route_policies").is_some() {
            with_routes(&current, routes.clone())?
        } else {
            let mut all = current.route_policies.clone();
            upsert(&mut all, routes[0].clone());
            with_routes(&current, all)?
        };
        self.strict_check(&routes)?;
        Ok(json!({"valid": true, "routes": next.route_policies.len()}))
    }

    /// Applies one write for `caller`; returns the new version.
    pub async fn change(&self, caller: &Caller, if_match: u64, change: Change) -> Result<u64, ApiError> {
        let result = self.change_locked(caller, if_match, change).await;
        let outcome = match &result {
            Ok(_) => "success",
            Err(e) if e.status == StatusCode::CONFLICT => "conflict",
            Err(e) if e.status.is_server_error() => "error",
            Err(_) => "rejected",
        };
        count_change(Source::Api, outcome);
        if let Err(e) = &result {
            tracing::warn!(token = %caller.name, code = e.code, error = %e.message, "management API change refused; nothing changed");
        }
        result
    }

    async fn change_locked(&self, caller: &Caller, if_match: u64, change: Change) -> Result<u64, ApiError> {
        let state = match &self.backend {
            Backend::Fleet(fleet) => {
                let rollback = match change {
                    Change::Rollback(n) => Some(n),
                    _ => None,
                };
                let version = fleet
                    .write(&caller.name, if_match, rollback, |target| self.plan(&change, target))
                    .await?;
                tracing::info!(token = %caller.name, version, "configuration changed through the management API, in the fleet's store");
                return Ok(version);
            }
            Backend::Local(state) => state,
        };
        let mut state = state.lock().await;
        if if_match != state.version {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "version_conflict",
                format!("If-Match {if_match} is stale: the current version is {}", state.version),
            ));
        }
        let target = match &change {
            Change::Rollback(n) => Some(
                state
                    .find(*n)
                    .ok_or_else(|| {
                        ApiError::new(
                            StatusCode::NOT_FOUND,
                            "version_not_found",
                            format!("version {n} is not in the history (GET /v1/versions)"),
                        )
                    })?
                    .routes
                    .clone(),
            ),
            _ => None,
        };
        let plan = self.plan(&change, target)?;
        let mut next = state.clone();
        for (name, route) in plan.set {
            next.overrides.insert(name, route);
        }
        let version = state.version + 1;
        next.record(
            Version {
                version,
                source: Source::Api,
                token: Some(caller.name.clone()),
                time: store::now(),
                summary: plan.summary.clone(),
                hash: store::routes_hash(&plan.next_cfg.route_policies),
                routes: plan.next_cfg.route_policies.clone(),
            },
            self.cfg.history,
        );
        next.save(&self.cfg.state_path).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "persist_failed",
                format!("cannot write {}: {e}; nothing changed", self.cfg.state_path.display()),
            )
        })?;
        // Permissive: the changed routes passed the strict checks; routes the
        // file made invalid stay as they are (§4.2).
        let snapshot = self
            .kernel
            .apply(plan.next_cfg, ApplyMode::Permissive)
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "apply_failed", e.to_string()))?;
        *state = next;
        tracing::info!(token = %caller.name, version, snapshot, change = %plan.summary, "configuration changed through the management API");
        Ok(version)
    }

    /// What `change` does to the routes in force, checked structurally and
    /// strictly. `target` is a rollback's routes.
    pub(super) fn plan(&self, change: &Change, target: Option<Vec<RoutePolicy>>) -> Result<Plan, ApiError> {
        let current = self.kernel.snapshot().config.clone();
        let mut routes = current.route_policies.clone();
        let mut set = Vec::new();
        let summary = match change {
            Change::Put(route) => {
                let old = routes.iter().find(|r| r.route_name == route.route_name);
                let verb = if old.is_some() { "replace" } else { "add" };
                let summary = format!("{verb} route {:?} (mode {})", route.route_name, route.mode.as_str());
                upsert(&mut routes, (**route).clone());
                self.strict_check([&**route])?;
                set.push((route.route_name.clone(), Some((**route).clone())));
                summary
            }
            Change::Delete(name) => {
                let before = routes.len();
                routes.retain(|r| &r.route_name != name);
                if routes.len() == before {
                    return Err(ApiError::new(
                        StatusCode::NOT_FOUND,
                        "route_not_found",
                        format!("no route {name:?}"),
                    ));
                }
                set.push((name.clone(), None));
                format!("delete route {name:?}")
            }
            Change::Rollback(n) => {
                let target = target.unwrap_or_default();
                let changed: Vec<&RoutePolicy> = target.iter().filter(|t| !routes.contains(t)).collect();
                self.strict_check(changed.iter().copied())?;
                for t in &changed {
                    set.push((t.route_name.clone(), Some((*t).clone())));
                }
                for r in &routes {
                    if !target.iter().any(|t| t.route_name == r.route_name) {
                        set.push((r.route_name.clone(), None));
                    }
                }
                routes = target;
                format!("rollback to version {n}")
            }
        };
        let next_cfg = with_routes(&current, routes)?;
        Ok(Plan { next_cfg, set, summary })
    }
}

/// What a write does: the configuration after it, the route slots it sets
/// (`None`: deleted), and a line saying what changed.
#[derive(Debug)]
pub struct Plan {
    /// The configuration in force after the write (checked).
    pub next_cfg: KernelConfig,
    /// The routes set, by name.
    pub set: Vec<(String, Option<RoutePolicy>)>,
    /// What changed, in a line.
    pub summary: String,
}

/// Replaces the route of the same name in place, or appends it.
fn upsert(routes: &mut Vec<RoutePolicy>, route: RoutePolicy) {
    match routes.iter_mut().find(|r| r.route_name == route.route_name) {
        Some(slot) => *slot = route,
        None => routes.push(route),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_takes_bare_and_quoted_versions() {
        assert_eq!(parse_if_match(Some(b"7")).unwrap(), 7);
        assert_eq!(parse_if_match(Some(b"\"7\"")).unwrap(), 7);
        assert_eq!(parse_if_match(Some(b"W/\"7\"")).unwrap(), 7);
        assert_eq!(
            parse_if_match(None).unwrap_err().status,
            StatusCode::PRECONDITION_REQUIRED
        );
        assert_eq!(parse_if_match(Some(b"x")).unwrap_err().code, "bad_if_match");
    }

    #[test]
    fn route_body_takes_the_path_name_and_refuses_another() {
        let r = parse_route(br#"{"request_policy_chain":[{"policy":"p"}]}"#, Some("/a/b")).unwrap();
        assert_eq!(r.route_name, "/a/b");
        let e = parse_route(br#"{"route_name":"/x"}"#, Some("/a/b")).unwrap_err();
        assert!(e.message.contains("/a/b"), "{}", e.message);
        let e = parse_route(br#"{"route_name":"/a","extra":1}"#, None).unwrap_err();
        assert!(e.message.contains("extra"), "{}", e.message);
        let e = parse_route(br#"{"route_name":"/a","mode":"dry"}"#, None).unwrap_err();
        assert!(e.message.contains("dry"), "{}", e.message);
        assert_eq!(parse_route(b"[1]", None).unwrap_err().code, "invalid_route");
    }
}
