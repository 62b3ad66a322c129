//! The management API's endpoints. JSON in and out; errors are
//! `{"code", "message"}` (plus `errors` for strict validation).
//!
//! | Method | Path | Role | |
//! |---|---|---|---|
//! | GET | `/v1/config` | read | version and effective routes (secret-looking params masked), agents |
//! | GET | `/v1/routes` | read | the routes |
//! | GET | `/v1/routes/{name}` | read | one route (name percent-encoded) |
//! | PUT | `/v1/routes/{name}` | write | create or replace a route |
//! | DELETE | `/v1/routes/{name}` | write | remove a route |
//! | POST | `/v1/validate` | read | dry run of a route or `{"route_policies": [...]}` |
//! | GET | `/v1/versions` | read | the last versions, newest first |
//! | GET | `/v1/versions/{n}` | read | one version with its routes |
//! | POST | `/v1/rollback` | write | `{"version": N}`: restore the routes of version N |
//!
//! Writes need `If-Match: VERSION`; every answer carries `ETag: "VERSION"`.
//! With a fleet store, writes get 503 `store_unavailable` while this kernel
//! cannot watch it, and `/v1/config` has a `store` object saying whether
//! the routes may be stale.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::auth::{Caller, Role};
use super::changes::{parse_if_match, parse_route, ApiError, Change};
use super::{Backend, Management};
use crate::config::RoutePolicy;

/// Largest request body accepted.
pub const MAX_BODY: usize = 1024 * 1024;

/// Words that make a param's value masked in answers.
const SECRET_WORDS: [&str; 5] = ["secret", "token", "key", "password", "credential"];

/// Whether a param named `name` holds something secret.
pub fn looks_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| lower.contains(w))
}

/// `route` as JSON, secret-looking param values replaced by `"***"`.
pub fn masked(route: &RoutePolicy) -> Value {
    let mut v = serde_json::to_value(route).unwrap_or(Value::Null);
    for chain in ["request_policy_chain", "response_policy_chain"] {
        let Some(entries) = v.get_mut(chain).and_then(Value::as_array_mut) else {
            continue;
        };
        for e in entries {
            let Some(params) = e.get_mut("params").and_then(Value::as_object_mut) else {
                continue;
            };
            for (k, val) in params.iter_mut() {
                if looks_secret(k) {
                    *val = Value::String("***".into());
                }
            }
        }
    }
    v
}

fn json_reply(status: StatusCode, body: &Value, version: u64) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("\"{version}\"")) {
        h.insert(hyper::header::ETAG, v);
    }
    resp
}

/// An error answer.
pub fn error_reply(e: &ApiError, version: u64) -> Response<Full<Bytes>> {
    let mut resp = json_reply(e.status, &e.body(), version);
    if e.status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
    }
    resp
}

fn route_name(encoded: &str) -> Result<String, ApiError> {
    let name = percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "bad_route_name", "route name is not UTF-8"))?;
    if name.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_route_name",
            "empty route name",
        ));
    }
    Ok(name.into_owned())
}

impl Management {
    /// Answers one request.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Full<Bytes>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let result = self.route_request(req).await;
        let version = self.version().await;
        match result {
            Ok((status, body)) => json_reply(status, &body, version),
            Err(e) => error_reply(&e, version),
        }
    }

    async fn route_request<B>(&self, req: Request<B>) -> Result<(StatusCode, Value), ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let caller = self
            .tokens()
            .check(req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes()))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "missing or unknown bearer token",
                )
            })?;
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let if_match = req
            .headers()
            .get(hyper::header::IF_MATCH)
            .map(|v| v.as_bytes().to_vec());
        let write =
            matches!(method, Method::PUT | Method::DELETE) || (method == Method::POST && path == "/v1/rollback");
        if write && caller.role != Role::Write {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("token {:?} is read-only", caller.name),
            ));
        }
        let body = read_body(req).await?;
        let ok = |v: Value| Ok((StatusCode::OK, v));
        match (&method, path.as_str()) {
            (&Method::GET, "/v1/config") => ok(self.config_json().await),
            (&Method::GET, "/v1/routes") => {
                let snap = self.kernel().snapshot();
                ok(json!({"routes": snap.config.route_policies.iter().map(masked).collect::<Vec<_>>()}))
            }
            (&Method::POST, "/v1/validate") => ok(self.validate(&body)?),
            (&Method::GET, "/v1/versions") => ok(self.versions_json().await?),
            (&Method::POST, "/v1/rollback") => {
                let n = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v.get("version").and_then(Value::as_u64))
                    .ok_or_else(|| {
                        ApiError::new(
                            StatusCode::BAD_REQUEST,
                            "invalid_rollback",
                            "body must be {\"version\": N}",
                        )
                    })?;
                self.write(&caller, if_match, Change::Rollback(n)).await
            }
            (m, p) if p.starts_with("/v1/versions/") => {
                if m != Method::GET {
                    return Err(not_allowed());
                }
                let n: u64 = p["/v1/versions/".len()..]
                    .parse()
                    .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "bad_version", "version must be a number"))?;
                ok(self.version_json(n).await?)
            }
            (m, p) if p.starts_with("/v1/routes/") => {
                let name = route_name(&p["/v1/routes/".len()..])?;
                match *m {
                    Method::GET => {
                        let snap = self.kernel().snapshot();
                        let route = snap.config.route_policies.iter().find(|r| r.route_name == name);
                        match route {
                            Some(r) => ok(masked(r)),
                            None => Err(ApiError::new(
                                StatusCode::NOT_FOUND,
                                "route_not_found",
                                format!("no route {name:?}"),
                            )),
                        }
                    }
                    Method::PUT => {
                        let route = parse_route(&body, Some(&name))?;
                        self.write(&caller, if_match, Change::Put(Box::new(route))).await
                    }
                    Method::DELETE => self.write(&caller, if_match, Change::Delete(name)).await,
                    _ => Err(not_allowed()),
                }
            }
            (_, "/v1/config" | "/v1/routes" | "/v1/validate" | "/v1/versions" | "/v1/rollback") => Err(not_allowed()),
            _ => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no endpoint {path}"),
            )),
        }
    }

    async fn write(
        &self,
        caller: &Caller,
        if_match: Option<Vec<u8>>,
        change: Change,
    ) -> Result<(StatusCode, Value), ApiError> {
        let expected = parse_if_match(if_match.as_deref())?;
        let version = self.change(caller, expected, change).await?;
        Ok((StatusCode::OK, json!({"version": version})))
    }

    /// `GET /v1/config`.
    pub async fn config_json(&self) -> Value {
        let version = self.version().await;
        let snap = self.kernel().snapshot();
        let routes: Vec<Value> = snap
            .config
            .route_policies
            .iter()
            .map(|r| {
                let mut v = masked(r);
                let problems = snap.routes.get(&r.route_name).map(|c| c.problems()).unwrap_or_default();
                v["valid"] = json!(problems.is_empty());
                v["problems"] = json!(problems);
                v
            })
            .collect();
        let agents = crate::admin::Admin::new(self.kernel().clone()).config_json()["agents"].take();
        let mut out = json!({
            "version": version,
            "snapshot_version": snap.version,
            "routes": routes,
            "agents": agents,
        });
        if let Some(status) = self.store_status() {
            out["store"] = status.json();
        }
        out
    }

    async fn versions_json(&self) -> Result<Value, ApiError> {
        let list: Vec<Value> = match &self.backend {
            Backend::Local(state) => {
                let state = state.lock().await;
                state.history.iter().rev().map(version_summary).collect()
            }
            Backend::Fleet(f) => f
                .history()
                .await?
                .iter()
                .rev()
                .map(|(v, e)| fleet_summary(*v, e))
                .collect(),
        };
        Ok(json!({"version": self.version().await, "versions": list}))
    }

    async fn version_json(&self, n: u64) -> Result<Value, ApiError> {
        let not_found = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "version_not_found",
                format!("version {n} is not in the history"),
            )
        };
        let (mut v, routes) = match &self.backend {
            Backend::Local(state) => {
                let state = state.lock().await;
                let v = state.find(n).ok_or_else(not_found)?;
                (version_summary(v), v.routes.clone())
            }
            Backend::Fleet(f) => {
                let history = f.history().await?;
                let (_, e) = history.iter().find(|(v, _)| *v == n).ok_or_else(not_found)?;
                (fleet_summary(n, e), f.routes_at(&history, n).await?)
            }
        };
        v["routes"] = routes.iter().map(masked).collect();
        Ok(v)
    }
}

fn version_summary(v: &super::store::Version) -> Value {
    json!({
        "version": v.version,
        "source": v.source,
        "token": v.token,
        "time": v.time,
        "summary": v.summary,
        "hash": v.hash,
    })
}

fn fleet_summary(version: u64, e: &super::fleet::history::Entry) -> Value {
    json!({
        "version": version,
        "source": "api",
        "token": e.token,
        "time": e.time,
        "summary": e.summary,
        "hash": e.hash,
        "routes_changed": e.steps.iter().map(|s| s.route.as_str()).collect::<Vec<_>>(),
    })
}

fn not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this endpoint",
    )
}

async fn read_body<B>(req: Request<B>) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body over {MAX_BODY} bytes or unreadable: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_params_are_masked() {
        let r: RoutePolicy = serde_json::from_value(json!({
            "route_name": "/a",
            "request_policy_chain": [{"policy": "p", "params": {"api_key": "k1", "header": "x", "Client_Secret": "s", "pass": "ok"}}],
            "response_policy_chain": [{"policy": "q", "params": {"password": "pw", "token_ttl": 5}}],
        }))
        .unwrap();
        let m = masked(&r);
        let p = &m["request_policy_chain"][0]["params"];
        assert_eq!(p["api_key"], "***");
        assert_eq!(p["Client_Secret"], "***");
        assert_eq!(p["header"], "x");
        assert_eq!(p["pass"], "ok");
        let q = &m["response_policy_chain"][0]["params"];
        assert_eq!(q["password"], "***");
        assert_eq!(q["token_ttl"], "***");
        assert_eq!(m["mode"], "enforce");
    }

    #[test]
    fn route_names_are_percent_decoded() {
        assert_eq!(route_name("%2Fapi%2Fv1%2Fusers").unwrap(), "/api/v1/users");
        assert_eq!(route_name("plain").unwrap(), "plain");
        assert_eq!(route_name("%FF").unwrap_err().code, "bad_route_name");
        assert_eq!(route_name("").unwrap_err().code, "bad_route_name");
    }
}
