//! A real headless Chromium (Debian's `chromium` package) driven over the DevTools
//! protocol: open a page, evaluate JavaScript in it, take a screenshot. The browser runs
//! with a fresh profile in a temp dir and is killed on drop.
#![allow(dead_code)]

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Browser {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Chromium binary: `CHROMIUM`, or Debian's.
fn binary() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

impl Browser {
    /// Starts Chromium headless with remote debugging on a free port. It starts in under
    /// a second here, but once, in a loaded run of the suite, it took 34 s to announce its
    /// port (its profile's first file was written 31 s after its start): a browser silent
    /// for 60 s is killed and started once more, and a second failure panics with what it
    /// printed.
    pub fn start() -> Browser {
        match Self::try_start() {
            Ok(b) => b,
            Err(first) => {
                eprintln!("chromium did not start, trying once more: {first}");
                Self::try_start().unwrap_or_else(|second| panic!("{second}"))
            }
        }
    }

    fn try_start() -> Result<Browser, String> {
        let bin = binary();
        assert!(
            std::path::Path::new(&bin).exists(),
            "{bin} not found: install Debian's chromium package (scripts/install-tools.sh does)"
        );
        let profile = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(&bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1400,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut seen = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                    let port: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
                    let _ = tx.send(Ok(port.parse::<u16>().unwrap_or(0)));
                    // the loop goes on draining, so the browser never blocks on a full pipe
                    continue;
                }
                seen.push_str(&line);
                seen.push('\n');
            }
            let _ = tx.send(Err(seen));
        });
        let started = Instant::now();
        let port = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(p)) if p > 0 => p,
            Ok(Err(log)) => {
                let _ = child.wait();
                return Err(format!("chromium exited before listening:\n{log}"));
            }
            other => {
                // killed, its stderr ends, and the reader hands over what it printed
                let _ = child.kill();
                let _ = child.wait();
                let log = match other {
                    Ok(Ok(_)) => "(it announced port 0)".to_string(),
                    _ => match rx.recv_timeout(Duration::from_secs(5)) {
                        Ok(Err(log)) => log,
                        _ => "(nothing more from its stderr)".to_string(),
                    },
                };
                return Err(format!(
                    "chromium did not announce its DevTools port in {:.0?}; it printed:\n{log}",
                    started.elapsed()
                ));
            }
        };
        Ok(Browser {
            child,
            port,
            _profile: profile,
        })
    }

    /// Opens `url` in a new tab and returns it.
    pub async fn open(&self, url: &str) -> Page {
        let endpoint = format!("http://127.0.0.1:{}/json/new?{url}", self.port);
        let target: Value = reqwest::Client::new()
            .put(&endpoint)
            .send()
            .await
            .expect("DevTools /json/new")
            .json()
            .await
            .expect("DevTools target JSON");
        let ws_url = target["webSocketDebuggerUrl"]
            .as_str()
            .expect("webSocketDebuggerUrl")
            .to_string();
        let (ws, _) = tokio_tungstenite::connect_async(ws_url)
            .await
            .expect("DevTools websocket");
        let mut page = Page { ws, next: 0 };
        page.call("Page.enable", json!({})).await;
        page.call("Runtime.enable", json!({})).await;
        page
    }
}

/// One tab.
pub struct Page {
    ws: Ws,
    next: u64,
}

impl Page {
    /// Sends a DevTools command and returns its result (events in between are skipped).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::Text(msg.into())).await.expect("send");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = tokio::time::timeout(left, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer in 30 s"))
                .expect("websocket open")
                .expect("websocket message");
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(&t).expect("DevTools JSON");
            if v["id"] == json!(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    pub async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("{expr}: {ex}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluates `expr`; an exception (e.g. the page is still loading and an element is
    /// missing) gives `None`.
    pub async fn try_eval(&mut self, expr: &str) -> Option<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if r.get("exceptionDetails").is_some() {
            return None;
        }
        Some(r["result"]["value"].clone())
    }

    /// Waits until `expr` evaluates to `true` (an exception counts as not yet); panics
    /// after `within` with `what`.
    pub async fn wait_for(&mut self, expr: &str, within: Duration, what: &str) {
        let deadline = Instant::now() + within;
        loop {
            if self.try_eval(expr).await == Some(json!(true)) {
                return;
            }
            if Instant::now() > deadline {
                let body = self
                    .eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!("{what} did not happen in {within:?}; the page shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Navigates and waits for the new document to load.
    pub async fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        self.wait_for(
            "document.readyState === 'complete'",
            Duration::from_secs(30),
            "page load",
        )
        .await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let r = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG")
    }
}
