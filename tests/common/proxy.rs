//! A TCP proxy between the node and anvil that a test can switch: pass traffic, refuse
//! (every connection, open or new, is closed at once), or blackhole (connections are
//! accepted and read, nothing is ever answered).

use std::net::SocketAddr;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Refuse,
    Blackhole,
}

pub struct Proxy {
    pub url: String,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub fn set(&self, m: Mode) {
        let _ = self.mode.send(m);
    }
}

/// Starts a proxy in front of `upstream` (an `http://host:port` URL).
pub async fn start(upstream: &str) -> Proxy {
    let u = url::Url::parse(upstream).unwrap();
    let port = u.port_or_known_default().unwrap();
    let upstream: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (mode, rx) = watch::channel(Mode::Pass);
    let task = tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let mut rx = rx.clone();
            tokio::spawn(async move {
                let current = { *rx.borrow() };
                match current {
                    Mode::Refuse => drop(client),
                    Mode::Blackhole => hold(client, rx).await,
                    Mode::Pass => {
                        let Ok(server) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        let (mut client, mut server) = (client, server);
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            m = next_mode(&mut rx, Mode::Pass) => {
                                if m == Some(Mode::Blackhole) {
                                    drop(server);
                                    hold(client, rx).await;
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    Proxy { url, mode, task }
}

/// Reads and discards until the proxy passes traffic again, then closes.
async fn hold(mut client: TcpStream, mut rx: watch::Receiver<Mode>) {
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            r = client.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return; },
            _ = next_mode(&mut rx, Mode::Blackhole) => return,
        }
    }
}

/// The next mode other than `from`.
async fn next_mode(rx: &mut watch::Receiver<Mode>, from: Mode) -> Option<Mode> {
    rx.wait_for(|m| *m != from).await.map(|r| *r).ok()
}
