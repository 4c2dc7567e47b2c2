//! Secrets never show: a node process resolving a market with an LLM evaluator (its
//! API key), the HTTP trigger's bearer token and an RPC endpoint whose provider key is
//! in the URL path, logging at trace level as text and as JSON. None of the three is in
//! any log line, any answer of the node's API, or the errors the CLI prints.

use crate::common;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::IntoResponse;
use common::node::{free_port, node_process_with, resolved_events, tmpdir, workflow_file};
use common::{
    Scripted, llm_server, market_with_three_workers, uniform_llm_reply, with_llm_evaluator,
};
use std::time::{Duration, Instant};

const LLM_KEY: &str = "sk-live-llmkey-0123456789";
const API_TOKEN: &str = "api-token-secret-4567";
const RPC_KEY: &str = "rpckeyabcdef0123456789";

/// An RPC endpoint that, like a provider's, takes its key in the path: every POST, on
/// any path, is forwarded to anvil's `/`. Returns `http://127.0.0.1:P/v2/<RPC_KEY>`.
async fn keyed_rpc(upstream: String) -> String {
    async fn forward(State(up): State<String>, body: Bytes) -> axum::response::Response {
        match reqwest::Client::new()
            .post(&up)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
        {
            Ok(r) => {
                let status = r.status().as_u16();
                let bytes = r.bytes().await.unwrap_or_default();
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    [("content-type", "application/json")],
                    bytes,
                )
                    .into_response()
            }
            Err(_) => axum::http::StatusCode::BAD_GATEWAY.into_response(),
        }
    }
    let app = Router::new().fallback(forward).with_state(upstream);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v2/{RPC_KEY}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn assert_clean(what: &str, text: &str) {
    for secret in [LLM_KEY, API_TOKEN, RPC_KEY] {
        assert!(
            !text.contains(secret),
            "{what} contains a secret ({secret}):\n{}",
            &text[text.find(secret).unwrap().saturating_sub(300)..]
                .chars()
                .take(600)
                .collect::<String>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_shows_in_logs_api_answers_or_errors() {
    for format in ["text", "json"] {
        let s = market_with_three_workers().await;
        let (llm_url, llm) = llm_server(vec![Scripted::content(&uniform_llm_reply(3))]).await;
        let dir = tmpdir(&format!("secrets-{format}"));
        let wf = workflow_file(&dir, |t| {
            with_llm_evaluator(t, &llm_url, "CRESOLVER_TEST_LLM_KEY")
        });
        let rpc = keyed_rpc(s.dev.rpc_url()).await;
        let api = format!("127.0.0.1:{}", free_port());
        let mut child = node_process_with(
            &s,
            &dir,
            &wf,
            None,
            &[
                ("CRESOLVER__CHAIN__RPC_URL", &rpc),
                ("CRESOLVER_TEST_LLM_KEY", LLM_KEY),
                ("CRESOLVER_API_TOKEN", API_TOKEN),
                ("CRESOLVER__API__LISTEN", &api),
                ("CRESOLVER_LOG", "trace"),
                ("CRESOLVER_LOG_FORMAT", format),
            ],
        );
        s.dev.request_resolution(s.market_id).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while resolved_events(&s).await.is_empty() {
            assert!(Instant::now() < deadline, "{format}: not resolved");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // the key was used: the LLM server received it
        assert_eq!(
            llm.requests.lock().unwrap()[0].0.as_deref(),
            Some(format!("Bearer {LLM_KEY}").as_str())
        );

        let base = format!("http://{api}");
        let client = reqwest::Client::new();
        let id = s.market_id;
        let mut answers = String::new();
        for path in [
            "/health".to_string(),
            "/health/ready".into(),
            "/metrics".into(),
            "/rounds".into(),
            format!("/rounds/{id}"),
            "/status/rounds".into(),
            format!("/status/rounds/{id}"),
        ] {
            let r = client.get(format!("{base}{path}")).send().await.unwrap();
            answers.push_str(&r.text().await.unwrap());
        }
        for auth in ["Bearer wrong-token", &format!("Bearer {API_TOKEN}")] {
            let r = client
                .post(format!("{base}/resolve"))
                .header("authorization", auth)
                .body(format!(r#"{{"market_id": {id}}}"#))
                .send()
                .await
                .unwrap();
            answers.push_str(&r.text().await.unwrap());
        }
        assert!(answers.contains("confirmed"), "{answers}");
        assert_clean(&format!("{format}: the API's answers"), &answers);
        tokio::time::sleep(Duration::from_millis(300)).await;
        child.kill().await.unwrap();
        let log = std::fs::read_to_string(dir.join("node.log")).unwrap();
        assert!(log.lines().count() > 100, "{format}: a trace log");
        assert!(log.contains("market resolved"), "{format}");
        if format == "json" {
            assert!(log.lines().all(|l| l.starts_with('{')), "JSON lines");
        }
        assert_clean(&format!("{format}: the node's log"), &log);
    }

    // errors the CLI prints for an endpoint that cannot be reached, with its key
    let port = free_port();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(["config", "check", "--rpc-url"])
        .arg(format!("http://127.0.0.1:{port}/v2/{RPC_KEY}"))
        .env("CRESOLVER_LOG", "trace")
        // the check reads the key first, as the node does
        .env("CRESOLVER_PRIVATE_KEY", format!("{:064x}", 1))
        .output()
        .await
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert_clean("config check's error", &text);
}
