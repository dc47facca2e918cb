//! Serving an axum router over TLS: accept, handshake, HTTP/1.1 per connection, with the
//! same graceful shutdown as the plain `axum::serve` path in `node.rs` (stop accepting,
//! let each connection finish its request, close idle ones).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// A client that connected but has not finished its handshake by then is dropped, so
/// half-open connections cannot pile up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (out of file descriptors): retrying at once would spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The end-entity certificate the client presented in the TLS handshake (already verified
/// against the configured CA), as a request extension. Absent on plain-HTTP connections
/// and on TLS connections without a client certificate: those requests carry no extension
/// at all, since inserting one builds a map per request (about 0.2 µs of a linearizable
/// read's CPU in the profile of `docs/security.md`). Shared by every request of the
/// connection: each request gets a reference count, not a copy of the DER bytes.
#[derive(Debug, Clone)]
pub struct PeerCertificate(pub Arc<PresentedCertificate>);

/// A connection's client certificate, and what its first requests proved with it.
#[derive(Debug)]
pub struct PresentedCertificate {
    pub der: CertificateDer<'static>,
    /// The node id this certificate was found valid for, set only after that check passed
    /// (`raft_rpc::proof`): the certificate cannot change within a connection, so later
    /// requests claiming the same id are not parsed again. A peer sends a request per
    /// heartbeat, append and ReadIndex round; parsing its certificate each time cost
    /// about 2% of a node's CPU under linearizable reads.
    pub valid_for_node: OnceLock<u64>,
}

/// Serves `router` on `listener` over TLS until `shutdown` turns true, then drains the
/// open connections (the caller bounds how long it waits for the returned task).
pub fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let acceptor = TlsAcceptor::from(tls);
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        let stopping = stopped(shutdown.clone());
        tokio::pin!(stopping);
        loop {
            tokio::select! {
                () = &mut stopping => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        let conn = connection(acceptor.clone(), tcp, router.clone(), shutdown.clone());
                        conns.spawn(conn);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a TLS connection");
                        tokio::time::sleep(ACCEPT_RETRY).await;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(listener);
        while conns.join_next().await.is_some() {}
    })
}

/// One connection: handshake, then HTTP/1.1 until the client closes or shutdown.
async fn connection(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    router: Router,
    shutdown: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let from = tcp.peer_addr().ok();
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(?from, error = %e, "TLS handshake refused");
            return;
        }
        Err(_) => {
            tracing::debug!(?from, "TLS handshake timed out");
            return;
        }
    };
    let cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|c| {
            PeerCertificate(Arc::new(PresentedCertificate {
                der: c.clone().into_owned(),
                valid_for_node: OnceLock::new(),
            }))
        });
    let service = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        if let Some(cert) = &cert {
            req.extensions_mut().insert(cert.clone());
        }
        service.call(req)
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let served = tokio::select! {
        served = conn.as_mut() => served,
        () = stopped(shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(?from, error = %e, "TLS connection ended with an error");
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
