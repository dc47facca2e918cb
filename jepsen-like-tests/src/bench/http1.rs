//! The raw cairn driver's transport: one HTTP/1.1 keep-alive connection per load-generator
//! worker and target, driven by the worker's own task while it waits for the answer.
//!
//! Why not reqwest's shared pool (the driver before git 1c1a33a): it runs every connection
//! as a task of its own and hands each request and answer across channels, and parses the
//! URL of every request, so one request woke two tasks in the load generator; the load
//! generator shares the machine's cores with the servers it measures, so whatever it
//! spends is taken from them. `cairn-jepsen bench` prints the load generator's CPU per
//! request against a stub at the start of every run; docs/design.md (Performance notes) has the before and after.
//! What an agent embedding the public library pays is `--cairn-driver client`.
//!
//! `cairn-secure` (auth + TLS): the same connection over TLS (rustls, trusting only the
//! cluster's CA) with `Authorization: Bearer` on every request ([`Secure`]); the handshake
//! is paid once per connection, as any keep-alive client pays it.
//!
//! The node's peer transport (`raft_rpc::network::PeerConn`) drives its connections the
//! same way; this is a separate copy on purpose: the harness judges the node from outside
//! and shares none of its code.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;

/// A plain TCP stream or a TLS one.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type Connection = http1::Connection<TokioIo<Box<dyn Io>>, Full<Bytes>>;

/// TLS to the cluster's CA and the bearer token of a `cairn-secure` cluster (either may be
/// off in the diagnostic split, `CAIRN_BENCH_SECURE_PARTS`).
#[derive(Clone)]
pub struct Secure {
    connector: Option<TlsConnector>,
    authorization: Option<http::HeaderValue>,
}

impl Secure {
    /// TLS trusting only the certificates of `ca_pem` (if given); `token` (if given) on
    /// every request.
    pub fn new(ca_pem: Option<&[u8]>, token: Option<&str>) -> Result<Secure, String> {
        let connector = ca_pem.map(Self::connector).transpose()?;
        let authorization = token
            .map(|token| {
                let mut v = http::HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| "the token cannot travel in a header".to_string())?;
                v.set_sensitive(true);
                Ok::<_, String>(v)
            })
            .transpose()?;
        Ok(Secure {
            connector,
            authorization,
        })
    }

    fn connector(ca_pem: &[u8]) -> Result<TlsConnector, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| format!("CA PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("CA certificate: {e}"))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsConnector::from(std::sync::Arc::new(config)))
    }
}

/// A status code and the whole body of an answer, or why there is none.
pub type Answer = Result<(u16, Bytes), String>;

/// POSTs to one `host:port`, reconnecting after any failure (a connection whose exchange
/// failed or timed out is never used again: its state is unknown).
pub struct Http1 {
    authority: String,
    timeout: Duration,
    conn: Option<Conn>,
    secure: Option<Secure>,
}

struct Conn {
    sender: SendRequest<Full<Bytes>>,
    connection: Pin<Box<Connection>>,
    /// The connection future has completed: it must not be polled again.
    ended: bool,
}

impl Http1 {
    /// `base` is `http://host:port` or `https://host:port` (the form `Node::url`
    /// returns); `https` needs [`Http1::secure`].
    pub fn new(base: &str, timeout: Duration) -> Http1 {
        let authority = base
            .strip_prefix("https://")
            .or_else(|| base.strip_prefix("http://"))
            .unwrap_or(base);
        Http1 {
            authority: authority.to_string(),
            timeout,
            conn: None,
            secure: None,
        }
    }

    /// TLS and the bearer token for every connection and request (`None`: plain).
    pub fn secure(mut self, secure: Option<Secure>) -> Http1 {
        self.secure = secure;
        self
    }

    /// POSTs a JSON `body` to `path` and reads the whole answer, within the timeout
    /// (connecting included).
    pub async fn post_json(&mut self, path: &str, body: Vec<u8>) -> Answer {
        let mut request = http::Request::post(path)
            .header(http::header::HOST, &self.authority)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(auth) = self.secure.as_ref().and_then(|s| s.authorization.as_ref()) {
            request = request.header(http::header::AUTHORIZATION, auth.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("encode: {e}"))?;
        let reusable = self
            .conn
            .take()
            .and_then(|mut conn| (!conn.has_ended()).then_some(conn));
        let exchange = async {
            let mut conn = match reusable {
                Some(conn) => conn,
                None => Conn::open(&self.authority, self.secure.as_ref()).await?,
            };
            let answer = conn.exchange(request).await?;
            Ok::<_, String>((answer, conn))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok((answer, conn))) => {
                self.conn = Some(conn);
                Ok(answer)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("transport: no answer within {:?}", self.timeout)),
        }
    }
}

impl Conn {
    async fn open(authority: &str, secure: Option<&Secure>) -> Result<Conn, String> {
        let stream = TcpStream::connect(authority)
            .await
            .map_err(|e| format!("transport: connecting to {authority}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("transport: {e}"))?;
        let stream: Box<dyn Io> = match secure.and_then(|s| s.connector.as_ref()) {
            None => Box::new(stream),
            Some(connector) => {
                let host = authority
                    .rsplit_once(':')
                    .map_or(authority, |(host, _)| host);
                let name = ServerName::try_from(host.to_string())
                    .map_err(|e| format!("transport: server name {host}: {e}"))?;
                let tls = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("transport: TLS to {authority}: {e}"))?;
                Box::new(tls)
            }
        };
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("transport: {e}"))?;
        Ok(Conn {
            sender,
            connection: Box::pin(connection),
            ended: false,
        })
    }

    /// Whether the server closed the connection while it sat idle (polled once, without
    /// waiting).
    fn has_ended(&mut self) -> bool {
        if !self.ended && self.connection.as_mut().now_or_never().is_some() {
            self.ended = true;
        }
        self.ended || self.sender.is_closed()
    }

    /// Sends `request` and reads the whole answer, polling the connection in this task
    /// until the answer is complete.
    async fn exchange(&mut self, request: http::Request<Full<Bytes>>) -> Answer {
        let sender = &mut self.sender;
        let answer = async move {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("transport: {e}"))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("reading body: {e}"))?;
            Ok((status, body.to_bytes()))
        };
        let mut answer = std::pin::pin!(answer);
        let (connection, ended) = (&mut self.connection, &mut self.ended);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(a) = answer.as_mut().poll(cx) {
                return Poll::Ready(a);
            }
            if *ended {
                return Poll::Ready(Err("transport: connection closed".into()));
            }
            let Poll::Ready(end) = connection.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            *ended = true;
            // A server that answers and closes ends the connection in the same poll that
            // completes the answer: look at the answer once more before calling it lost.
            match answer.as_mut().poll(cx) {
                Poll::Ready(a) => Poll::Ready(a),
                Poll::Pending => Poll::Ready(Err(match end {
                    Ok(()) => "transport: connection closed".into(),
                    Err(e) => format!("transport: {e}"),
                })),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server that answers the requests it reads, in order, with `answers` (raw bytes),
    /// closes a connection after an answer that says `connection: close`, and returns how
    /// many connections it accepted once every answer is sent.
    async fn serve(answers: Vec<&'static str>) -> (String, tokio::task::JoinHandle<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut accepted = 0;
            let mut answers = answers.into_iter();
            while let Ok((mut stream, _)) = listener.accept().await {
                accepted += 1;
                let mut buf = [0u8; 4096];
                loop {
                    let Some(answer) = answers.next() else {
                        return accepted;
                    };
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    stream.write_all(answer.as_bytes()).await.unwrap();
                    if answer.contains("connection: close") {
                        break;
                    }
                }
            }
            accepted
        });
        (base, task)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    const CLOSE: &str =
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 4\r\n\r\nbusy";

    #[tokio::test]
    async fn answers_reuse_one_connection_and_a_closed_one_is_replaced() {
        let (base, server) = serve(vec![OK, OK, CLOSE, OK]).await;
        let mut http = Http1::new(&base, Duration::from_secs(5));
        for _ in 0..2 {
            let (status, body) = http.post_json("/v1/read", b"{}".to_vec()).await.unwrap();
            assert_eq!((status, &body[..]), (200, &b"ok"[..]));
        }
        // Answered and closed: the answer is returned, and the next request reconnects.
        // (Whether the close lands in the same poll as the answer is up to the scheduler,
        // so this does not pin down the "look once more" branch of `exchange`.)
        let (status, body) = http.post_json("/v1/read", b"{}".to_vec()).await.unwrap();
        assert_eq!((status, &body[..]), (503, &b"busy"[..]));
        let (status, _) = http.post_json("/v1/read", b"{}".to_vec()).await.unwrap();
        assert_eq!(status, 200);
        drop(http);
        assert_eq!(server.await.unwrap(), 2, "one reconnect, after the close");
    }

    #[tokio::test]
    async fn a_silent_server_is_a_timeout_and_nothing_listening_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut http = Http1::new(&base, Duration::from_millis(200));
        let err = http
            .post_json("/v1/read", b"{}".to_vec())
            .await
            .unwrap_err();
        assert!(err.contains("no answer within"), "{err}");
        drop(listener);
        let err = http
            .post_json("/v1/read", b"{}".to_vec())
            .await
            .unwrap_err();
        assert!(err.contains("transport"), "{err}");
    }
}
