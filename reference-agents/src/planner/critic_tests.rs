use super::*;
use crate::planner::calls::{declared_tools, planned_calls, Location};
use serde_json::json;

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (*k, *v)).collect()
}

fn declared() -> Declared {
    declared_tools(&json!({"tools": [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {"name": "search"}}
    ]}))
    .unwrap()
}

fn call(index: usize, name: &str, args: &str) -> PlannedCall {
    PlannedCall {
        index,
        id: Some(format!("c{index}")),
        name: name.into(),
        arguments: Arguments::Text(args.into()),
        location: Location::OpenAi { choice: 0, call: index },
    }
}

fn check(cfg: &CriticConfig, c: &PlannedCall) -> Option<&'static str> {
    let d = declared();
    let caller = Caller::default();
    let cx = PlanContext {
        declared: Some(&d),
        caller: &caller,
    };
    cfg.check(c, cx, &SchemaCache::default()).map(|f| f.check)
}

#[test]
fn declared_tools_schemas_and_json() {
    let cfg = CriticConfig::parse(&params(&[])).unwrap();
    assert_eq!(check(&cfg, &call(0, "read_file", r#"{"path": "/srv/data/a"}"#)), None);
    assert_eq!(check(&cfg, &call(0, "search", "")), None);
    assert_eq!(check(&cfg, &call(0, "delete_repo", "{}")), Some("unknown_tool"));
    assert_eq!(check(&cfg, &call(0, "", "{}")), Some("unknown_tool"));
    assert_eq!(
        check(&cfg, &call(0, "read_file", r#"{"path": 3}"#)),
        Some("schema_mismatch")
    );
    assert_eq!(check(&cfg, &call(0, "read_file", "{}")), Some("schema_mismatch"));
    assert_eq!(
        check(&cfg, &call(0, "read_file", r#"{"path": "#)),
        Some("invalid_arguments")
    );
    assert_eq!(check(&cfg, &call(0, "read_file", "[1]")), Some("invalid_arguments"));
    let off = CriticConfig::parse(&params(&[("check_schemas", "false")])).unwrap();
    assert_eq!(check(&off, &call(0, "read_file", r#"{"path": 3}"#)), None);
}

#[test]
fn allowed_tools_rules_and_argument_guards() {
    let cfg = CriticConfig::parse(&params(&[
        ("allowed_tools", "read_*, search, delete_repo"),
        (
            "rules",
            r#"[{"name": "no-delete", "effect": "deny", "tools": ["delete_*"]}, {"name": "all", "effect": "allow"}]"#,
        ),
        (
            "constraints",
            r#"[{"tools": ["read_file"], "path_args": ["path"], "allowed_paths": ["/srv/data"]}]"#,
        ),
    ]))
    .unwrap();
    assert_eq!(check(&cfg, &call(0, "read_file", r#"{"path": "/srv/data/a"}"#)), None);
    // allowed_tools wins over the declared tools.
    assert_eq!(check(&cfg, &call(0, "read_more", "{}")), None);
    assert_eq!(check(&cfg, &call(0, "write_file", "{}")), Some("unknown_tool"));
    assert_eq!(check(&cfg, &call(0, "delete_repo", "{}")), Some("rule_denied"));
    assert_eq!(
        check(&cfg, &call(0, "read_file", r#"{"path": "/etc/passwd"}"#)),
        Some("argument_refused")
    );
    assert_eq!(
        check(&cfg, &call(0, "read_file", r#"{"path": "/srv/data/../../etc/passwd"}"#)),
        Some("argument_refused")
    );
}

#[test]
fn the_step_limit_refuses_the_calls_past_it() {
    let cfg = CriticConfig::parse(&params(&[("max_calls", "2")])).unwrap();
    let calls: Vec<PlannedCall> = (0..4).map(|i| call(i, "search", "{}")).collect();
    let d = declared();
    let caller = Caller::default();
    let cx = PlanContext {
        declared: Some(&d),
        caller: &caller,
    };
    let f = cfg.check_plan(&calls, cx, &SchemaCache::default());
    assert_eq!(
        f.iter().map(|f| (f.index, f.check)).collect::<Vec<_>>(),
        [(2, "step_limit"), (3, "step_limit")]
    );
}

#[test]
fn without_declared_tools_or_allowed_tools_every_tool_is_unknown() {
    let cfg = CriticConfig::parse(&params(&[])).unwrap();
    let caller = Caller::default();
    let cx = PlanContext {
        declared: None,
        caller: &caller,
    };
    let f = cfg
        .check(&call(0, "search", "{}"), cx, &SchemaCache::default())
        .unwrap();
    assert_eq!(
        (f.check, f.detail.as_str()),
        ("unknown_tool", "not declared by the request")
    );
}

#[test]
fn hostile_arguments_get_a_check_not_a_panic() {
    let cfg = CriticConfig::parse(&params(&[])).unwrap();
    // Deeper than serde_json reads: refused as invalid, no stack overflow.
    let deep = format!("{{\"path\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(check(&cfg, &call(0, "read_file", &deep)), Some("invalid_arguments"));
    let huge = format!("{{\"path\": \"{}\"}}", "a".repeat(MAX_ARGUMENTS_BYTES));
    assert_eq!(check(&cfg, &call(0, "read_file", &huge)), Some("arguments_too_large"));
    // A declared schema that does not compile: arguments are not validated.
    let d = declared_tools(&json!({"tools": [{"name": "x", "input_schema": {"type": 12}}]})).unwrap();
    let caller = Caller::default();
    let cx = PlanContext {
        declared: Some(&d),
        caller: &caller,
    };
    assert!(cfg.check(&call(0, "x", "{}"), cx, &SchemaCache::default()).is_none());
    // A body nested deeper than serde_json reads is not a plan.
    let deep_body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(serde_json::from_str::<Value>(&deep_body).is_err());
    assert!(
        planned_calls(&json!({"choices": [{"message": {"tool_calls": [{"function": 3}]}}]}))[0]
            .name
            .is_empty()
    );
}

#[test]
fn bad_params_name_the_param() {
    for (k, v) in [
        ("on_violation", "maybe"),
        ("max_calls", "0"),
        ("max_calls", "x"),
        ("allowed_tools", "a[b"),
        ("rules", "not json"),
        ("constraints", "[{}]"),
        ("check_schemas", "perhaps"),
        ("flag_header", "bad header"),
    ] {
        let err = CriticConfig::parse(&params(&[(k, v)])).unwrap_err().to_string();
        assert!(err.contains(k), "{k}={v}: {err}");
    }
}
