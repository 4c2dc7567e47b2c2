//! A deadline on every JSON-RPC call: a tower layer on alloy's transport (http and ws
//! alike) that ends a request with a transport error when no answer came in time, so a
//! lost request (a load balancer that drops it, a half-open connection, an endpoint that
//! accepts and never answers) is a typed transient error like a refused connection,
//! never a task that waits for ever.

use crate::rpc_error::DeadlineExceeded;
use alloy::rpc::json_rpc::{RequestPacket, ResponsePacket};
use alloy::transports::{TransportError, TransportErrorKind, TransportFut};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// Adds a deadline to every request of the service it wraps.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    timeout: Duration,
}

impl DeadlineLayer {
    /// A layer that ends each request after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service a [`DeadlineLayer`] wraps around `S`: each call fails with a typed
/// [`DeadlineExceeded`] when `S` has not answered within the timeout.
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    inner: S,
    timeout: Duration,
}

impl<S> Service<RequestPacket> for DeadlineService<S>
where
    S: Service<
            RequestPacket,
            Response = ResponsePacket,
            Future = TransportFut<'static>,
            Error = TransportError,
        >
        + Send
        + 'static
        + Clone,
{
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: RequestPacket) -> Self::Future {
        let fut = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(r) => r,
                Err(_) => Err(TransportErrorKind::custom(DeadlineExceeded {
                    after: timeout,
                })),
            }
        })
    }
}
