//! Encoding of a chain entry's `params` into the string map agents receive.
//!
//! YAML scalars become their string form (`100`, `true`, `nosniff`); lists and
//! maps become compact JSON, so `required_roles: ["admin"]` reaches the agent
//! as `["admin"]`.

use std::collections::BTreeMap;

use serde_yaml::Value;

/// Encodes every parameter; the error names the parameter that cannot be
/// encoded and why.
pub fn encode_params(params: &BTreeMap<String, Value>) -> Result<BTreeMap<String, String>, (String, String)> {
    params
        .iter()
        .map(|(k, v)| encode_value(v).map(|s| (k.clone(), s)).map_err(|e| (k.clone(), e)))
        .collect()
}

fn encode_value(value: &Value) -> Result<String, String> {
    match value {
        Value::Null => Ok(String::new()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::String(s) => Ok(s.clone()),
        Value::Sequence(_) | Value::Mapping(_) => {
            to_json(value).and_then(|j| serde_json::to_string(&j).map_err(|e| e.to_string()))
        }
        Value::Tagged(_) => Err("YAML tags are not supported in params".into()),
    }
}

fn to_json(value: &Value) -> Result<serde_json::Value, String> {
    Ok(match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Number(n) => serde_json::to_value(n).map_err(|e| e.to_string())?,
        Value::String(s) => serde_json::Value::String(s.clone()),
        Value::Sequence(items) => serde_json::Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Mapping(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let key = match k {
                    Value::String(s) => s.clone(),
                    Value::Bool(_) | Value::Number(_) => encode_value(k)?,
                    _ => return Err("map keys in params must be scalars".into()),
                };
                out.insert(key, to_json(v)?);
            }
            serde_json::Value::Object(out)
        }
        Value::Tagged(_) => return Err("YAML tags are not supported in params".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(yaml: &str) -> BTreeMap<String, String> {
        let params: BTreeMap<String, Value> = serde_yaml::from_str(yaml).unwrap();
        encode_params(&params).unwrap()
    }

    #[test]
    fn scalars_become_their_string_form() {
        let p = enc("a: 100\nb: true\nc: X-API-Key\nd: 1.5\ne: null\nf: '007'");
        assert_eq!(p["a"], "100");
        assert_eq!(p["b"], "true");
        assert_eq!(p["c"], "X-API-Key");
        assert_eq!(p["d"], "1.5");
        assert_eq!(p["e"], "");
        assert_eq!(p["f"], "007");
    }

    #[test]
    fn lists_and_maps_become_compact_json() {
        let p = enc("required_roles: [\"admin\"]\nm: {x: 1, y: [a, b]}\nl:\n  - 1\n  - two");
        assert_eq!(p["required_roles"], r#"["admin"]"#);
        assert_eq!(p["m"], r#"{"x":1,"y":["a","b"]}"#);
        assert_eq!(p["l"], r#"[1,"two"]"#);
    }

    #[test]
    fn multi_line_block_is_kept_verbatim() {
        let p = enc("headers: |\n  A: \"1\"\n  B: \"2\"\n");
        assert_eq!(p["headers"], "A: \"1\"\nB: \"2\"\n");
    }

    #[test]
    fn non_scalar_map_keys_are_refused_with_the_param_name() {
        let params: BTreeMap<String, Value> = serde_yaml::from_str("bad: {[1]: x}").unwrap();
        let (name, _) = encode_params(&params).unwrap_err();
        assert_eq!(name, "bad");
    }
}
