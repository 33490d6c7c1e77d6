//! A small JSON Schema validator for the subset `docs/events.schema.json`
//! uses: `type` (one or a list), `const`, `enum`, `required`, `properties`,
//! `additionalProperties: false`, `items`, `minimum`, `oneOf` and local
//! `$ref`s into `$defs`. A schema keyword outside that subset panics, so the
//! schema cannot grow a rule this validator would silently ignore.
//!
//! Why not the `jsonschema` crate: it adds ~70 s to a cold debug build of
//! the test binary on these 2-core machines (40 more crates). The subset is
//! small, and the events test also checks the same lines with Python's
//! `jsonschema` when it is installed.

use serde_json::Value;

/// Keywords that only describe (no assertion in draft 2020-12).
const ANNOTATIONS: &[&str] = &["$schema", "$id", "$defs", "title", "description", "format"];

/// Validates `value` against `schema` (whose `$ref`s resolve in `root`);
/// the errors, each with the JSON pointer of the offending value.
pub fn validate(root: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(root, root, value, "", &mut errors);
    errors
}

fn check(root: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        panic!("schema at {at} is not an object: {schema}");
    };
    for (key, rule) in obj {
        match key.as_str() {
            k if ANNOTATIONS.contains(&k) => {}
            "$ref" => {
                let target = resolve(root, rule.as_str().expect("$ref is a string"));
                check(root, target, value, at, errors);
            }
            "type" => {
                let names: Vec<&str> = match rule {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().map(|t| t.as_str().unwrap()).collect(),
                    _ => panic!("bad type rule {rule}"),
                };
                if !names.iter().any(|n| has_type(value, n)) {
                    errors.push(format!("{at}: expected type {names:?}, got {value}"));
                }
            }
            "const" if value != rule => {
                errors.push(format!("{at}: expected {rule}, got {value}"));
            }
            "const" => {}
            "enum" => {
                if !rule.as_array().unwrap().contains(value) {
                    errors.push(format!("{at}: {value} is not one of {rule}"));
                }
            }
            "minimum" => {
                if let Some(n) = value.as_f64()
                    && n < rule.as_f64().unwrap()
                {
                    errors.push(format!("{at}: {n} is below the minimum {rule}"));
                }
            }
            "required" => {
                if let Some(o) = value.as_object() {
                    for name in rule.as_array().unwrap() {
                        let name = name.as_str().unwrap();
                        if !o.contains_key(name) {
                            errors.push(format!("{at}: missing required `{name}`"));
                        }
                    }
                }
            }
            "properties" => {
                if let Some(o) = value.as_object() {
                    for (name, sub) in rule.as_object().unwrap() {
                        if let Some(v) = o.get(name) {
                            check(root, sub, v, &format!("{at}/{name}"), errors);
                        }
                    }
                }
            }
            "additionalProperties" => {
                assert_eq!(rule, &Value::Bool(false), "only `false` is supported");
                let known = obj.get("properties").and_then(Value::as_object);
                if let Some(o) = value.as_object() {
                    for name in o.keys() {
                        if !known.is_some_and(|k| k.contains_key(name)) {
                            errors.push(format!("{at}: unexpected property `{name}`"));
                        }
                    }
                }
            }
            "items" => {
                if let Some(a) = value.as_array() {
                    for (i, v) in a.iter().enumerate() {
                        check(root, rule, v, &format!("{at}/{i}"), errors);
                    }
                }
            }
            "oneOf" => {
                let results: Vec<Vec<String>> = rule
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|sub| {
                        let mut e = Vec::new();
                        check(root, sub, value, at, &mut e);
                        e
                    })
                    .collect();
                let passing = results.iter().filter(|e| e.is_empty()).count();
                if passing != 1 {
                    // The closest branch's errors say the most.
                    let closest = results.iter().min_by_key(|e| e.len()).cloned();
                    errors.push(format!(
                        "{at}: matches {passing} of the oneOf branches, not 1; closest: {closest:?}"
                    ));
                }
            }
            other => panic!("schema keyword `{other}` is not supported by this validator"),
        }
    }
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => panic!("unknown type `{name}`"),
    }
}

fn resolve<'a>(root: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference
        .strip_prefix('#')
        .unwrap_or_else(|| panic!("only local $refs are supported: {reference}"));
    root.pointer(pointer)
        .unwrap_or_else(|| panic!("$ref {reference} resolves to nothing"))
}
