//! The websocket connector of the RPC pool and the head subscription: a socket with
//! `TCP_NODELAY` that acknowledges what it reads at once (`TCP_QUICKACK`), under the same
//! backend loop as alloy's `WsBackend`.
//!
//! Over one websocket the node multiplexes many small JSON-RPC calls (discovery reads
//! several workers at once). A server with Nagle's algorithm on (anvil is one) holds its
//! second small answer until the first is acknowledged, and Linux delays that ACK by
//! 40 ms when the client has nothing to send: the bimodal 20 ms / 65 ms request →
//! confirmed latency of `cargo bench --bench node`. alloy's `WsConnect` opens its socket
//! with Nagle on and delayed ACKs, and its backend loop only runs on that socket type, so
//! this module opens the socket itself and runs an equal loop: requests out first, a
//! keep-alive ping after 10 s of silence, answers and notifications in.

use alloy::pubsub::{ConnectionHandle, ConnectionInterface, PubSubConnect};
use alloy::rpc::json_rpc::PubSubItem;
use alloy::transports::ws::{WebSocketConfig, WsConnect};
use alloy::transports::{TransportErrorKind, TransportResult};
use futures::{SinkExt, StreamExt};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// alloy's default keep-alive ping interval, kept.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// A websocket endpoint with its retry policy.
#[derive(Clone)]
pub struct NoDelayWs {
    inner: WsConnect,
    max_retries: u32,
    retry_interval: Duration,
}

impl NoDelayWs {
    /// `url` (credentials in it become the `Authorization` header, as with `WsConnect`),
    /// retried `max_retries` times `retry_interval` apart when the connection drops.
    pub fn new(url: &str, max_retries: u32, retry_interval: Duration) -> Self {
        Self {
            inner: WsConnect::new(url),
            max_retries,
            retry_interval,
        }
    }
}

impl std::fmt::Debug for NoDelayWs {
    /// The URL redacted: it may carry an API key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoDelayWs")
            .field("url", &crate::redact_url(self.inner.url()))
            .finish_non_exhaustive()
    }
}

impl PubSubConnect for NoDelayWs {
    fn is_local(&self) -> bool {
        self.inner.is_local()
    }

    async fn connect(&self) -> TransportResult<ConnectionHandle> {
        let config: Option<WebSocketConfig> = self.inner.config().copied();
        let req = self
            .inner
            .clone()
            .into_client_request()
            .map_err(TransportErrorKind::custom)?;
        let uri = req.uri();
        let host = uri
            .host()
            .ok_or_else(|| TransportErrorKind::custom_str("the websocket URL has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("wss") {
                443
            } else {
                80
            });
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(TransportErrorKind::custom)?;
        tcp.set_nodelay(true).map_err(TransportErrorKind::custom)?;
        let (socket, _) =
            tokio_tungstenite::client_async_tls_with_config(req, QuickAck(tcp), config, None)
                .await
                .map_err(TransportErrorKind::custom)?;
        let (handle, interface) = ConnectionHandle::new();
        tokio::spawn(backend(socket, interface));
        Ok(handle
            .with_max_retries(self.max_retries)
            .with_retry_interval(self.retry_interval))
    }
}

/// A TCP stream that re-arms `TCP_QUICKACK` after every read: the kernel drops quick-ACK
/// mode on its own, so one `setsockopt` at connect time would not last.
struct QuickAck(TcpStream);

impl QuickAck {
    fn rearm(&self) {
        #[cfg(target_os = "linux")]
        {
            // Best effort: a failure only brings the delayed ACK back.
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
        }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let out = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(out, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.rearm();
        }
        out
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

type Socket = WebSocketStream<MaybeTlsStream<QuickAck>>;

/// alloy's `WsBackend` loop on our socket: new requests first, then the keep-alive, then
/// what the server sent. A missed pong, a close, a binary frame or an unreadable message
/// ends the connection with an error, and the frontend reconnects.
async fn backend(mut socket: Socket, mut interface: ConnectionInterface) {
    let keepalive = tokio::time::sleep(KEEPALIVE);
    tokio::pin!(keepalive);
    let mut expecting_pong = false;
    let errored = loop {
        tokio::select! {
            biased;
            inst = interface.recv_from_frontend() => match inst {
                Some(msg) => {
                    keepalive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE);
                    if let Err(e) = socket.send(Message::Text(msg.get().to_owned().into())).await {
                        tracing::debug!(error = %e, "websocket send failed");
                        break true;
                    }
                }
                None => break false,
            },
            _ = &mut keepalive => {
                if expecting_pong {
                    tracing::debug!("the websocket server missed a pong");
                    break true;
                }
                keepalive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE);
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    break true;
                }
                expecting_pong = true;
            }
            resp = socket.next() => match resp {
                Some(Ok(Message::Text(text))) => {
                    match serde_json::from_str::<PubSubItem>(&text) {
                        Ok(item) => {
                            if interface.send_to_frontend(item).is_err() {
                                break true;
                            }
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "unreadable websocket message");
                            break true;
                        }
                    }
                }
                Some(Ok(Message::Pong(_))) => expecting_pong = false,
                Some(Ok(Message::Ping(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_) | Message::Binary(_))) | None => {
                    tracing::debug!("the websocket server closed the connection");
                    break true;
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "websocket read failed");
                    break true;
                }
            }
        }
    };
    if errored {
        interface.close_with_error();
    }
}
