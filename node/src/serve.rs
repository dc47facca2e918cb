//! The accept loop of both ports: accept, TLS handshake when configured, HTTP/1.1 per
//! connection, graceful shutdown (stop accepting, let each connection finish its request,
//! close idle ones).
//!
//! A limit on everything a client can hold open:
//! - at most [`ServeOptions::connections`] open connections: past it nothing more is
//!   accepted until one closes (the kernel's backlog queues the rest), so idle
//!   connections cannot take every file descriptor the node has;
//! - a request head must arrive within [`ServeOptions::head_timeout`] of the connection
//!   opening or of its previous answer (hyper's header-read timer runs while a kept-alive
//!   connection waits for its next request), so a half-sent or idle request is dropped;
//! - a TLS handshake must finish within [`HANDSHAKE_TIMEOUT`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::tls::PeerCertificate;

/// A client that connected but has not finished its handshake by then is dropped, so
/// half-open connections cannot pile up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (out of file descriptors): retrying at once would spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);
/// The largest request head (request line and headers) read; a longer one is answered
/// 431 by hyper. Keys and prefixes travel in bodies; the longest legitimate head is a
/// `GET /v1/watch` with a 512-byte prefix, percent-encoded.
pub const HEAD_BYTES_MAX: usize = 64 * 1024;

/// How many connections a port holds open at most, and how many it holds now.
#[derive(Debug)]
pub struct ConnectionBound {
    permits: Arc<Semaphore>,
    max: usize,
    /// Connections accepted and not yet closed. Not `max - available permits`: the accept
    /// loop holds the next connection's permit while it waits for one to arrive.
    open: AtomicUsize,
    /// Set while the port is full, so the warning is logged once per episode.
    full: AtomicBool,
}

impl ConnectionBound {
    pub fn new(max: usize) -> Arc<Self> {
        assert!(max > 0, "a port that accepts no connection serves nothing");
        Arc::new(ConnectionBound {
            permits: Arc::new(Semaphore::new(max)),
            max,
            open: AtomicUsize::new(0),
            full: AtomicBool::new(false),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot for the next connection; waits while `max` are open.
    async fn slot(&self, port: &str) -> OwnedSemaphorePermit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            self.full.store(false, Ordering::Relaxed);
            return permit;
        }
        if !self.full.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                port,
                connections_max = self.max,
                "every connection slot is taken; accepting no more until one closes"
            );
        }
        self.permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }
}

/// How one port serves.
#[derive(Clone)]
pub struct ServeOptions {
    /// `"client"` or `"peer"`, for logs.
    pub port: &'static str,
    /// HTTPS when given.
    pub tls: Option<Arc<ServerConfig>>,
    pub connections: Arc<ConnectionBound>,
    pub head_timeout: Duration,
    /// Counts TLS handshakes that failed or timed out (`/metrics`).
    pub handshakes_failed: Arc<AtomicU64>,
}

/// Serves `router` on `listener` until `shutdown` turns true, then drains the open
/// connections (the caller bounds how long it waits for the returned task).
pub fn serve(
    listener: TcpListener,
    options: ServeOptions,
    router: Router,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let acceptor = options.tls.clone().map(TlsAcceptor::from);
        let mut conns = tokio::task::JoinSet::new();
        let stopping = stopped(shutdown.clone());
        tokio::pin!(stopping);
        loop {
            let permit = tokio::select! {
                () = &mut stopping => break,
                permit = options.connections.slot(options.port) => permit,
            };
            tokio::select! {
                () = &mut stopping => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        let conn = Connection {
                            _slot: OpenSlot::taken(&options.connections, permit),
                            options: options.clone(),
                            router: router.clone(),
                            shutdown: shutdown.clone(),
                        };
                        conns.spawn(conn.run(tcp, acceptor.clone()));
                    }
                    Err(e) => {
                        tracing::warn!(port = options.port, error = %e, "accepting a connection");
                        tokio::time::sleep(ACCEPT_RETRY).await;
                    }
                },
            }
            // Reap finished connections so the set does not grow with every one ever served.
            while conns.try_join_next().is_some() {}
        }
        drop(listener);
        while conns.join_next().await.is_some() {}
    })
}

/// An accepted connection's place in its port's [`ConnectionBound`], given back (and
/// uncounted) when the connection is dropped.
struct OpenSlot {
    bound: Arc<ConnectionBound>,
    _permit: OwnedSemaphorePermit,
}

impl OpenSlot {
    fn taken(bound: &Arc<ConnectionBound>, permit: OwnedSemaphorePermit) -> Self {
        bound.open.fetch_add(1, Ordering::Relaxed);
        OpenSlot {
            bound: bound.clone(),
            _permit: permit,
        }
    }
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.bound.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One accepted connection; its slot is given back when it is dropped.
struct Connection {
    _slot: OpenSlot,
    options: ServeOptions,
    router: Router,
    shutdown: watch::Receiver<bool>,
}

impl Connection {
    /// Handshake (with TLS), then HTTP/1.1 until the client closes or shutdown.
    async fn run(self, tcp: TcpStream, acceptor: Option<TlsAcceptor>) {
        let _ = tcp.set_nodelay(true);
        let from = tcp.peer_addr().ok();
        let Some(acceptor) = acceptor else {
            return self.http(TokioIo::new(tcp), None).await;
        };
        let handshake = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("not finished within {HANDSHAKE_TIMEOUT:?}")),
        };
        let tls = match handshake {
            Ok(tls) => tls,
            Err(reason) => {
                self.options
                    .handshakes_failed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(port = self.options.port, ?from, %reason, "TLS handshake failed");
                return;
            }
        };
        let cert = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| PeerCertificate::new(c.clone().into_owned()));
        self.http(TokioIo::new(tls), cert).await
    }

    async fn http<I>(self, io: I, cert: Option<PeerCertificate>)
    where
        I: Read + Write + Unpin + Send + 'static,
    {
        let service = TowerToHyperService::new(self.router);
        let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
            if let Some(cert) = &cert {
                req.extensions_mut().insert(cert.clone());
            }
            service.call(req)
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.options.head_timeout)
            .max_header_size(HEAD_BYTES_MAX)
            .serve_connection(io, service);
        tokio::pin!(conn);
        let served = tokio::select! {
            served = conn.as_mut() => served,
            () = stopped(self.shutdown) => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = served {
            tracing::debug!(port = self.options.port, error = %e, "connection ended with an error");
        }
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
