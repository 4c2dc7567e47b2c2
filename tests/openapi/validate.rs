//! Checks a real answer against the OpenAPI description: its status is one the
//! description lists for the route, its content type one listed for that status, and a
//! JSON body validates against the described schema (`$ref`s resolved into the
//! document's components). Objects are checked strictly: a field the description does
//! not name fails (the test adds `additionalProperties: false` to every described
//! object, after merging the parts of an `allOf`).

use serde_json::{Map, Value, json};

/// The description, made strict for validation.
pub struct Described {
    /// The description as served.
    pub doc: Value,
    /// Its components, strict.
    strict_components: Value,
}

/// `r` with a `$ref` to a component schema replaced by that schema.
fn resolve<'a>(r: &'a Value, components: &'a Value) -> &'a Value {
    match r.get("$ref").and_then(Value::as_str) {
        Some(p) => {
            let name = p.rsplit('/').next().unwrap_or_default();
            &components["schemas"][name]
        }
        None => r,
    }
}

/// Merges an `allOf` of objects into one object, and forbids fields an object does not
/// describe, everywhere in `v`.
fn strict(v: &mut Value, components: &Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(all)) = m.get("allOf").cloned() {
                let (mut props, mut required, mut objects) = (Map::new(), Vec::new(), true);
                for item in &all {
                    let item = resolve(item, components);
                    match item.get("properties").and_then(Value::as_object) {
                        Some(p) => props.extend(p.clone()),
                        None => objects = false,
                    }
                    if let Some(r) = item.get("required").and_then(Value::as_array) {
                        required.extend(r.iter().cloned());
                    }
                }
                if objects {
                    m.remove("allOf");
                    m.insert("type".into(), json!("object"));
                    m.insert("properties".into(), Value::Object(props));
                    m.insert("required".into(), Value::Array(required));
                }
            }
            if m.get("properties").is_some_and(Value::is_object)
                && !m.contains_key("additionalProperties")
            {
                m.insert("additionalProperties".into(), json!(false));
            }
            for (_, child) in m.iter_mut() {
                strict(child, components);
            }
        }
        Value::Array(a) => {
            for x in a {
                strict(x, components);
            }
        }
        _ => {}
    }
}

impl Described {
    /// The node's description.
    pub fn new() -> Self {
        let doc = serde_json::to_value(cresolver_node::api::openapi()).unwrap();
        let mut strict_components = doc["components"].clone();
        let original = strict_components.clone();
        strict(&mut strict_components, &original);
        Self {
            doc,
            strict_components,
        }
    }

    /// Every (method, path) the description has, methods upper-case.
    pub fn operations(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for (method, _) in item.as_object().unwrap() {
                if ["get", "post", "put", "patch", "delete", "head", "options"]
                    .contains(&method.as_str())
                {
                    out.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        out
    }

    /// Whether `instance` validates against `schema`; the errors when not.
    pub fn validate(&self, schema: &Value, instance: &Value) -> Result<(), String> {
        let mut root = schema.clone();
        strict(&mut root, &self.doc["components"]);
        let mut root = match root {
            Value::Object(m) => m,
            other => return Err(format!("not a schema: {other}")),
        };
        root.insert("components".into(), self.strict_components.clone());
        let errors = crate::common::schema_errors(&Value::Object(root), instance);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Checks one answer of `method path` (the described path, e.g. `/rounds/{market_id}`).
    pub fn check(
        &self,
        method: &str,
        path: &str,
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) {
        let what = format!("{method} {path} → {status}");
        let op = &self.doc["paths"][path][method.to_lowercase()];
        assert!(
            op.is_object(),
            "{what}: the description has no such operation"
        );
        let resp = &op["responses"][status.to_string()];
        assert!(
            resp.is_object(),
            "{what}: the description does not list this status ({})",
            String::from_utf8_lossy(body)
        );
        for (name, _) in resp["headers"].as_object().into_iter().flatten() {
            // the next page's cursor is absent on the last page
            if name != "x-next-cursor" {
                assert!(
                    headers.contains_key(name.as_str()),
                    "{what}: no {name} header"
                );
            }
        }
        let ctype = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let Some(content) = resp["content"].as_object() else {
            assert!(
                body.is_empty(),
                "{what}: a body the description does not have"
            );
            return;
        };
        let media = content
            .get(&ctype)
            .unwrap_or_else(|| panic!("{what}: content type {ctype:?} is not described"));
        if ctype == "application/json" {
            let value: Value =
                serde_json::from_slice(body).unwrap_or_else(|e| panic!("{what}: not JSON ({e})"));
            if let Err(e) = self.validate(&media["schema"], &value) {
                panic!("{what}: the body does not match the description: {e}\nbody: {value}");
            }
        } else {
            assert!(
                std::str::from_utf8(body).is_ok(),
                "{what}: a {ctype} body that is not text"
            );
        }
    }
}
