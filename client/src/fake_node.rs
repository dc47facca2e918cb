//! Test-only HTTP/1.1 node stand-in: records every request and answers from a script, so
//! unit tests can check retry, discovery, session and watch behaviour without a cluster.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Most bytes of one request the fake node accepts (test requests are tiny).
const REQUEST_BYTES_MAX: usize = 1 << 20;

/// One request as the fake node received it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: String,
    /// Path and query, e.g. `/v1/watch?from_revision=5`.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    pub body: String,
}

pub(crate) enum Reply {
    Json(u16, String),
    /// Read the request, then close the connection without answering.
    Drop,
    /// Read the request, then hold the connection open without answering (a stopped node:
    /// its kernel still accepts connections).
    Hang,
    /// A `text/event-stream` carrying these `data:` payloads, then closed.
    Events(Vec<String>),
    /// The same stream, then held open without another byte (a node stopped mid-watch).
    EventsThenSilence(Vec<String>),
}

type Script = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

pub(crate) struct FakeNode {
    pub addr: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeNode {
    /// Serves until the test's runtime ends; `script(request, index)` decides each answer.
    pub async fn start(script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, script.clone(), log.clone()));
            }
        });
        FakeNode { addr, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut socket: TcpStream, script: Arc<Script>, log: Arc<Mutex<Vec<Seen>>>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let index = {
        let mut log = log.lock().unwrap();
        log.push(request.clone());
        log.len() - 1
    };
    let reply = script(&request, index);
    let silent_after = matches!(reply, Reply::EventsThenSilence(_));
    let response = match reply {
        Reply::Drop => return,
        Reply::Hang => {
            std::future::pending::<()>().await;
            return;
        }
        Reply::Json(status, body) => format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        ),
        Reply::Events(payloads) | Reply::EventsThenSilence(payloads) => {
            let events: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
                 : hello\n\n{events}"
            )
        }
    };
    let _ = socket.write_all(response.as_bytes()).await;
    if silent_after {
        std::future::pending::<()>().await;
    }
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Seen> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 || buffer.len() > REQUEST_BYTES_MAX {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let header = |wanted: &str| {
        head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case(wanted)
                .then(|| value.trim().to_string())
        })
    };
    let length = header("content-length")
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length.min(REQUEST_BYTES_MAX) {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let mut words = head.split_whitespace();
    Some(Seen {
        method: words.next()?.to_string(),
        path: words.next()?.to_string(),
        authorization: header("authorization"),
        body: String::from_utf8_lossy(&buffer[head_end..]).to_string(),
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
