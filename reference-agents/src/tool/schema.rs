//! `toolSchemaValidation`: `tools/call` arguments must match the tool's
//! input schema (JSON Schema, with the `jsonschema` crate; `$ref`s to other
//! documents are not fetched).
//!
//! Schemas come from `schemas_file` (a JSON object, tool name -> schema;
//! re-read when the file changes) and, with `learn` (default true), from
//! the `inputSchema` of the tools in `tools/list` replies that pass through
//! the policy's response phase (put the policy in the route's response chain
//! too). Learned schemas are kept per MCP endpoint (the request path), at
//! most [`MAX_LEARNED`], the oldest dropped first; a schema that does not
//! compile is not learned (logged). The file wins over what was learned.
//! A tool whose schema was not learned yet (or was dropped) is unknown: to
//! enforce, use `schemas_file` or `unknown_tools: deny`.
//!
//! Learning streams (`streams_response_body`, event streams only): in an SSE
//! reply each event is read as it passes, unchanged, and a `tools/list`
//! result is learned from its own event; a JSON reply is buffered by the
//! kernel and read whole.
//!
//! A call whose arguments do not match is answered HTTP 200 with JSON-RPC
//! error -32602 (invalid params), whose `data` holds the `instancePath` and
//! the `schemaPath` of the first error (never the value). A tool with no
//! schema: allowed, or refused with -32602 when `unknown_tools: deny`.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use jsonschema::Validator;
use serde_json::{json, Map, Value};

use super::authorize::prefix_separator;
use super::deny::{self, config_error, Incoming, Refusal, Style};
use super::events::{self, EventMessage};
use super::reply::{self, Format};
use crate::jsonrpc::{Envelope, INVALID_PARAMS};
use crate::param_cache::ParamCache;
use crate::rules::strip_prefix;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome,
    ResponseContext, ResponseOutcome,
};

const NAME: &str = "toolSchemaValidation";
const KEYS: &[&str] = &["schemas_file", "learn", "unknown_tools", "tool_prefix_separator"];

/// Learned schemas kept at most, over all endpoints.
pub const MAX_LEARNED: usize = 4096;

/// Parsed params of `toolSchemaValidation`.
#[derive(Debug)]
pub struct SchemaConfig {
    file: Option<PathBuf>,
    learn: bool,
    deny_unknown: bool,
    prefix_separator: Option<String>,
}

impl SchemaConfig {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let file = p
            .get("schemas_file")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let learn = p.bool_or("learn", true)?;
        let deny_unknown = match p.get("unknown_tools").map(str::trim) {
            None | Some("") | Some("allow") => false,
            Some("deny") => true,
            Some(other) => return Err(ParamError::invalid("unknown_tools", other, "expected allow or deny")),
        };
        if file.is_none() && !learn {
            return Err(ParamError::Missing("schemas_file (or learn: true)".into()));
        }
        Ok(SchemaConfig {
            file,
            learn,
            deny_unknown,
            prefix_separator: prefix_separator(p),
        })
    }
}

type Schemas = Arc<HashMap<String, Arc<Validator>>>;

struct FileEntry {
    stamp: (Option<SystemTime>, u64),
    schemas: Schemas,
}

#[derive(Default)]
struct Learned {
    map: HashMap<(String, String), Arc<Validator>>,
    order: VecDeque<(String, String)>,
}

/// The `toolSchemaValidation` policy.
pub struct ToolSchemaValidation {
    cache: ParamCache<SchemaConfig>,
    files: Mutex<HashMap<PathBuf, FileEntry>>,
    learned: Mutex<Learned>,
}

impl std::fmt::Debug for ToolSchemaValidation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSchemaValidation").finish_non_exhaustive()
    }
}

impl Default for ToolSchemaValidation {
    fn default() -> Self {
        ToolSchemaValidation::new()
    }
}

/// Compiles one schema.
fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// Reads and compiles a schemas file: `{"tool": {schema}, ...}`.
fn load_file(path: &Path) -> Result<HashMap<String, Arc<Validator>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let map: Map<String, Value> =
        serde_json::from_str(&text).map_err(|e| format!("expected a JSON object of tool name -> schema: {e}"))?;
    let mut out = HashMap::with_capacity(map.len());
    for (tool, schema) in map {
        let v = compile(&schema).map_err(|e| format!("schema of tool `{tool}` does not compile: {e}"))?;
        out.insert(tool, Arc::new(v));
    }
    Ok(out)
}

/// The endpoint a schema was learned from: the path without query or
/// trailing slash. Not the Host header, which the client chooses freely.
fn scope(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() { "/" } else { trimmed }.to_string()
}

impl ToolSchemaValidation {
    /// A policy with empty caches.
    pub fn new() -> Self {
        ToolSchemaValidation {
            cache: ParamCache::new(KEYS),
            files: Mutex::new(HashMap::new()),
            learned: Mutex::new(Learned::default()),
        }
    }

    fn file_schemas(&self, path: &Path) -> Result<Schemas, ParamError> {
        let bad = |why: String| ParamError::invalid("schemas_file", &path.display().to_string(), why);
        let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read: {e}")))?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = files.get(path).filter(|e| e.stamp == stamp) {
            return Ok(Arc::clone(&entry.schemas));
        }
        let schemas: Schemas = Arc::new(load_file(path).map_err(bad)?);
        files.insert(
            path.to_path_buf(),
            FileEntry {
                stamp,
                schemas: Arc::clone(&schemas),
            },
        );
        Ok(schemas)
    }

    fn learned(&self, scope: &str, tool: &str) -> Option<Arc<Validator>> {
        let learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        learned.map.get(&(scope.to_string(), tool.to_string())).cloned()
    }

    /// Learns the schemas of the tools in one reply message; returns how many.
    pub fn learn(&self, scope: &str, msg: &Value) -> usize {
        let Some(tools) = msg.pointer("/result/tools").and_then(Value::as_array) else {
            return 0;
        };
        let mut n = 0;
        for t in tools {
            let (Some(name), Some(schema)) = (t.get("name").and_then(Value::as_str), t.get("inputSchema")) else {
                continue;
            };
            let v = match compile(schema) {
                Ok(v) => Arc::new(v),
                Err(e) => {
                    tracing::warn!(tool = name, endpoint = scope, error = %e, "tool input schema does not compile: not learned");
                    continue;
                }
            };
            let key = (scope.to_string(), name.to_string());
            let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
            if learned.map.insert(key.clone(), v).is_none() {
                learned.order.push_back(key);
                while learned.order.len() > MAX_LEARNED {
                    if let Some(old) = learned.order.pop_front() {
                        learned.map.remove(&old);
                    }
                }
            }
            n += 1;
        }
        n
    }

    /// Validates every `tools/call` of a body.
    fn validate(&self, cfg: &SchemaConfig, file: Option<&Schemas>, scope: &str, env: &Envelope) -> RequestOutcome {
        let mut refusals = Vec::new();
        let mut verdict = "none";
        for (i, m) in env.messages.iter().enumerate() {
            if m.method.as_deref() != Some("tools/call") {
                continue;
            }
            let Ok(Some(name)) = m.target() else { continue };
            let tool = strip_prefix(name, cfg.prefix_separator.as_deref());
            let validator = file
                .and_then(|f| f.get(tool).cloned())
                .or_else(|| cfg.learn.then(|| self.learned(scope, tool)).flatten());
            let Some(validator) = validator else {
                if cfg.deny_unknown {
                    refusals.push(Refusal {
                        index: i,
                        code: INVALID_PARAMS,
                        message: format!("no input schema is known for tool `{name}`"),
                        data: json!({"tool": name}),
                    });
                } else if verdict == "none" {
                    verdict = "unknown";
                }
                continue;
            };
            let empty = Value::Object(Map::new());
            let args = m.tool_arguments().unwrap_or(&empty);
            let first = validator.iter_errors(args).next().map(|err| {
                (
                    err.instance_path().as_str().to_string(),
                    err.schema_path().as_str().to_string(),
                )
            });
            match first {
                None => verdict = "valid",
                Some((instance, schema_path)) => {
                    let at = if instance.is_empty() {
                        "(root)"
                    } else {
                        instance.as_str()
                    };
                    refusals.push(Refusal {
                        index: i,
                        code: INVALID_PARAMS,
                        message: format!("arguments of tool `{name}` do not match its input schema at {at}"),
                        data: json!({"instancePath": instance, "schemaPath": schema_path}),
                    });
                }
            }
        }
        if refusals.is_empty() {
            return RequestOutcome::proceed().set_metadata("mcp.schema", verdict);
        }
        RequestOutcome::denied_with(deny::render(
            Style::JsonRpcError,
            None,
            env,
            &refusals,
            "invalid_params",
        ))
        .set_metadata("mcp.schema", "invalid")
        .set_metadata("mcp.decision", "deny")
        .set_metadata("mcp.rule", "schema")
    }
}

impl Policy for ToolSchemaValidation {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Both, body: true, streams: true, events_only: true }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, SchemaConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        if !cfg.learn
            || ctx.response.status() != 200
            || ctx
                .response
                .header("content-encoding")
                .is_some_and(|e| !e.eq_ignore_ascii_case("identity"))
        {
            return Ok(ChunkOutcome::pass());
        }
        let scope = scope(ctx.request.path());
        let mut n = 0;
        for ev in ctx.events {
            match events::read(ev) {
                EventMessage::Message(v) => {
                    n += events::messages(&v)
                        .into_iter()
                        .map(|m| self.learn(&scope, m))
                        .sum::<usize>()
                }
                EventMessage::NotJson(e) => tracing::warn!(endpoint = scope, error = %e, "event not read for schemas"),
                EventMessage::None => {}
            }
        }
        Ok(if n > 0 {
            ChunkOutcome::pass().set_metadata("mcp.schemas_learned", n.to_string())
        } else {
            ChunkOutcome::pass()
        })
    }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, SchemaConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let file = match &cfg.file {
            Some(path) => Some(self.file_schemas(path).map_err(|e| config_error(NAME, &e))?),
            None => None,
        };
        match deny::incoming(NAME, ctx)? {
            Incoming::NotPost => Ok(RequestOutcome::proceed()),
            Incoming::Bad(d) => Ok(RequestOutcome::denied_with(d)
                .set_metadata("mcp.decision", "deny")
                .set_metadata("mcp.rule", "invalid_jsonrpc")),
            Incoming::Messages(env) => {
                let scope = scope(ctx.request.path());
                Ok(self.validate(&cfg, file.as_ref(), &scope, &env))
            }
        }
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, SchemaConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let (true, Some(format), Some(body)) = (
            cfg.learn && ctx.response.status() == 200,
            Format::of(ctx.response.header("content-type")),
            ctx.response.body(),
        ) else {
            return Ok(ResponseOutcome::proceed());
        };
        if body.is_empty()
            || ctx
                .response
                .header("content-encoding")
                .is_some_and(|e| !e.eq_ignore_ascii_case("identity"))
        {
            return Ok(ResponseOutcome::proceed());
        }
        let scope = scope(ctx.request.path());
        let mut n = 0;
        if let Err(e) = reply::each(body, format, &mut |msg| n += self.learn(&scope, msg)) {
            tracing::warn!(endpoint = scope, error = %e, "reply not read for schemas");
        }
        Ok(if n > 0 {
            ResponseOutcome::proceed().set_metadata("mcp.schemas_learned", n.to_string())
        } else {
            ResponseOutcome::proceed()
        })
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
