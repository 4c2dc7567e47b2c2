//! `docs/reference/http-api.md` from the OpenAPI description: every operation with its
//! parameters, request body and responses, then every schema with its fields.

use serde_json::{Map, Value};
use std::fmt::Write;

/// The line the generated part of the page starts after; what is above it is written
/// by hand and kept.
pub const MARKER: &str = "<!-- Everything below is generated from the OpenAPI description (GET /openapi.json) by tests/openapi: CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- openapi:: -->";

/// A table cell: pipes escaped, newlines joined.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn schema_name(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

/// A schema as a short type: a link to a named schema, `string` (with its pattern),
/// `array of …`, `… or null`.
pub fn type_of(s: &Value) -> String {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = schema_name(r);
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(items) = s.get(key).and_then(Value::as_array) {
            let parts: Vec<String> = items.iter().map(type_of).collect();
            return parts.join(" or ");
        }
    }
    if let Some(items) = s.get("allOf").and_then(Value::as_array) {
        let parts: Vec<String> = items.iter().map(type_of).collect();
        return format!("all of {}", parts.join(", "));
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let nullable = types.contains(&"null");
    let base = types.iter().copied().find(|t| *t != "null");
    let mut out = match base {
        Some("array") => array_type(s),
        Some("string") => match s.get("pattern").and_then(Value::as_str) {
            Some(p) => format!("string `{p}`"),
            None => "string".into(),
        },
        Some("integer") => "integer".into(),
        Some(t) => t.to_string(),
        None if nullable => String::new(),
        None => "any".into(),
    };
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        let words: Vec<String> = e
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        out = format!("one of {}", words.join(", "));
    }
    if nullable {
        if out.is_empty() {
            return "null".into();
        }
        out.push_str(" or null");
    }
    out
}

fn array_type(s: &Value) -> String {
    if let Some(prefix) = s.get("prefixItems").and_then(Value::as_array) {
        let parts: Vec<String> = prefix.iter().map(type_of).collect();
        return format!("array: {}", parts.join(", "));
    }
    match s.get("items") {
        Some(items) if items.is_object() => format!("array of {}", type_of(items)),
        _ => "array".into(),
    }
}

fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut ops = Vec::new();
    let Some(paths) = doc["paths"].as_object() else {
        return ops;
    };
    for (path, item) in paths {
        for method in ["get", "post", "put", "patch", "delete"] {
            if let Some(op) = item.get(method) {
                ops.push((method.to_uppercase(), path.clone(), op.clone()));
            }
        }
    }
    ops
}

fn parameters(out: &mut String, op: &Value) {
    let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) else {
        return;
    };
    out.push_str("\n| Parameter | In | Type | Required | Meaning |\n|---|---|---|---|---|\n");
    for p in params {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            p["name"].as_str().unwrap_or_default(),
            p["in"].as_str().unwrap_or_default(),
            cell(&type_of(&p["schema"])),
            if p["required"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            cell(p["description"].as_str().unwrap_or_default()),
        );
    }
}

fn request_body(out: &mut String, op: &Value) {
    let Some(content) = op["requestBody"]["content"].as_object() else {
        return;
    };
    for (ctype, media) in content {
        let _ = write!(
            out,
            "\nRequest body (`{ctype}`): {}",
            type_of(&media["schema"])
        );
        if let Some(d) = op["requestBody"]["description"].as_str() {
            let _ = write!(out, ": {d}");
        }
        out.push_str(".\n");
    }
}

fn responses(out: &mut String, op: &Value) {
    out.push_str("\n| Status | Content type | Body | Meaning |\n|---|---|---|---|\n");
    let empty = Map::new();
    for (status, r) in op["responses"].as_object().unwrap_or(&empty) {
        let mut meaning = r["description"].as_str().unwrap_or_default().to_string();
        for (h, hv) in r["headers"].as_object().unwrap_or(&empty) {
            let _ = write!(
                meaning,
                "; header `{h}`: {}",
                hv["description"].as_str().unwrap_or_default()
            );
        }
        let content = r["content"].as_object().filter(|c| !c.is_empty());
        match content {
            Some(c) => {
                for (ctype, media) in c {
                    let _ = writeln!(
                        out,
                        "| {status} | `{ctype}` | {} | {} |",
                        cell(&type_of(&media["schema"])),
                        cell(&meaning)
                    );
                }
            }
            None => {
                let _ = writeln!(out, "| {status} | | | {} |", cell(&meaning));
            }
        }
    }
}

fn operation(out: &mut String, method: &str, path: &str, op: &Value, item: &Value) {
    let _ = writeln!(out, "\n### `{method} {path}`\n");
    for key in ["summary", "description"] {
        if let Some(t) = op[key].as_str().filter(|t| !t.is_empty()) {
            let _ = writeln!(out, "{t}\n");
        }
    }
    if let Some(servers) = item["servers"].as_array() {
        for s in servers {
            let _ = writeln!(
                out,
                "Served on `{}`: {}.\n",
                s["url"].as_str().unwrap_or_default(),
                s["description"].as_str().unwrap_or_default()
            );
        }
    }
    if op["security"].as_array().is_some_and(|s| !s.is_empty()) {
        out.push_str("Needs `Authorization: Bearer <token>`.\n");
    }
    parameters(out, op);
    request_body(out, op);
    responses(out, op);
}

fn schema(out: &mut String, name: &str, s: &Value) {
    let _ = writeln!(out, "\n### `{name}`\n");
    if let Some(d) = s["description"].as_str() {
        let _ = writeln!(out, "{d}\n");
    }
    if let Some(parts) = s["allOf"].as_array() {
        // a flattened struct: the fields of the named parts, and those listed here
        let named: Vec<String> = parts
            .iter()
            .filter(|p| p.get("$ref").is_some())
            .map(type_of)
            .collect();
        let _ = writeln!(out, "Every field of {}, and:\n", named.join(", "));
        for p in parts.iter().filter(|p| p.get("properties").is_some()) {
            fields(out, p);
        }
        return;
    }
    if s.get("properties").is_none() {
        let _ = writeln!(out, "{}.", type_of(s));
        return;
    }
    fields(out, s);
}

/// The table of an object schema's fields.
fn fields(out: &mut String, s: &Value) {
    let empty = Map::new();
    let props = s["properties"].as_object().unwrap_or(&empty);
    let required: Vec<&str> = s["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("| Field | Type | Required | Meaning |\n|---|---|---|---|\n");
    for (field, p) in props {
        let _ = writeln!(
            out,
            "| `{field}` | {} | {} | {} |",
            cell(&type_of(p)),
            if required.contains(&field.as_str()) {
                "yes"
            } else {
                "no"
            },
            cell(p["description"].as_str().unwrap_or_default()),
        );
    }
}

/// The generated part of the page.
pub fn reference(doc: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Endpoints\n\nOpenAPI {} description of version {}, served by the node at `GET /openapi.json`. In the schemas, a field that is not required may be left out, and one whose type says `or null` may be `null`.",
        doc["openapi"].as_str().unwrap_or_default(),
        doc["info"]["version"].as_str().unwrap_or_default()
    );
    for (method, path, op) in operations(doc) {
        operation(&mut out, &method, &path, &op, &doc["paths"][&path]);
    }
    out.push_str("\n## Schemas\n");
    let empty = Map::new();
    for (name, s) in doc["components"]["schemas"].as_object().unwrap_or(&empty) {
        schema(&mut out, name, s);
    }
    out
}

/// The page: the hand-written part of `on_disk` (all of it when it has no marker yet),
/// the marker, and the reference.
pub fn page(on_disk: &str, doc: &Value) -> String {
    let intro = on_disk.split(MARKER).next().unwrap_or_default().trim_end();
    format!("{intro}\n\n{MARKER}\n{}", reference(doc))
}
