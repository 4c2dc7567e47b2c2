//! The HTTP API's OpenAPI description (`GET /openapi.json`) against the node itself:
//! `docs/reference/http-api.md` is generated from it; every route the routers serve is
//! in it; a node on anvil answers every route, error statuses included, with a status
//! the description lists and a body that validates against the described schema; and
//! the build's version and commit are shown by `cresolver --version` and `/health`.
//!
//! `CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- openapi::` rewrites the reference.

use crate::common;
mod live;
mod markdown;
mod validate;

use std::path::PathBuf;
use validate::Described;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_http_reference_is_generated_from_the_description() {
    let rel = "docs/reference/http-api.md";
    let path = root().join(rel);
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = markdown::page(&on_disk, &Described::new().doc);
    if std::env::var_os("CRESOLVER_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    assert!(
        on_disk == generated,
        "{rel} is not current: run `CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- openapi::` and commit it"
    );
}

#[test]
fn the_description_is_openapi_3_1_and_every_schema_compiles() {
    let d = Described::new();
    assert_eq!(d.doc["openapi"], "3.1.0");
    assert_eq!(d.doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    for (name, _) in d.doc["components"]["schemas"].as_object().unwrap() {
        let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
        // compiles (every $ref resolves); `null` is not an instance of any object schema
        let _ = d.validate(&schema, &serde_json::Value::Null);
        let compiled = d.validate(&schema, &serde_json::json!({}));
        assert!(
            compiled
                .as_ref()
                .err()
                .is_none_or(|e| !e.contains("does not compile")),
            "{name}: {compiled:?}"
        );
    }
    // every operation has at least one response, and every route says what it is
    for (method, path) in d.operations() {
        let op = &d.doc["paths"][&path][method.to_lowercase()];
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{method} {path}"
        );
        assert!(op["summary"].is_string(), "{method} {path} has no summary");
    }
    let resolve = &d.doc["paths"]["/resolve"]["post"]["responses"];
    for status in ["202", "400", "401", "403", "413", "503"] {
        assert!(resolve[status].is_object(), "POST /resolve {status}");
    }
    assert!(resolve["401"]["headers"]["WWW-Authenticate"].is_object());
    assert!(
        d.doc["paths"][cresolver_don::wire::PATH]["post"].is_object(),
        "the DON endpoint is described"
    );
}

/// Every route is registered with its description: the routers are built only with
/// `routes!` (no plain axum `.route(…)`, which would serve a path the description does
/// not have), and on every described path each method the description does not list
/// is answered 405 (checked against a running node in `live`).
#[test]
fn every_route_is_registered_through_its_description() {
    let sources = [
        "crates/node/src/api.rs",
        "crates/node/src/status.rs",
        "crates/don/src/server.rs",
    ];
    for rel in sources {
        let text = std::fs::read_to_string(root().join(rel)).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains(".route(")
                    && !code.contains(".route_service(")
                    && !code.contains(".nest("),
                "{rel}:{}: a route registered without its description: {line}",
                i + 1
            );
        }
        assert!(text.contains("routes!("), "{rel}");
    }
}

/// `cresolver --version` names the version and the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("cresolver {} (", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(head) => assert!(text.contains(&head[..12]), "{text} (HEAD is {head})"),
        None => assert!(text.contains("unknown") || text.contains('('), "{text}"),
    }
    assert_eq!(
        cresolver_node::build_info::COMMIT,
        text.split(['(', ' ', ')']).nth(3).unwrap_or_default()
    );
}

/// The validation is strict: a field the description does not name, a value outside
/// its pattern, and a missing required field all fail.
#[test]
fn validation_refuses_what_the_description_does_not_say() {
    let d = Described::new();
    let live = serde_json::json!({ "$ref": "#/components/schemas/Live" });
    assert!(
        d.validate(&live, &serde_json::json!({"status": "live"}))
            .is_ok()
    );
    for bad in [
        serde_json::json!({"status": "live", "extra": 1}),
        serde_json::json!({"status": "dead"}),
        serde_json::json!({}),
    ] {
        assert!(d.validate(&live, &bad).is_err(), "{bad}");
    }
    // a flattened round (allOf) is strict too
    let detail = serde_json::json!({ "$ref": "#/components/schemas/RoundDetail" });
    let err = d
        .validate(
            &detail,
            &serde_json::json!({"transactions": [], "nope": true}),
        )
        .unwrap_err();
    assert!(err.contains("nope") || err.contains("Additional"), "{err}");
}
