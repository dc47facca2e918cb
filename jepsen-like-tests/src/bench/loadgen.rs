//! The load generator's own cost: the raw cairn driver against an HTTP/1.1 stub that
//! answers every request at once with a read-sized JSON body. The stub runs on its own
//! thread (its own single-threaded runtime), so its CPU time can be told apart from the
//! client's: the result is the client's CPU per request, hence how many requests per
//! second one core of this machine can generate.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::cairn::Worker;
use super::sysinfo;
use super::workload::{self, PointSpec, Workload};

const CLIENTS: usize = 64;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadgenCheck {
    pub clients: usize,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Cores used by the client side (the whole process minus the stub's thread).
    pub client_cores: f64,
    /// Client CPU per request (µs), and the request rate one core could generate.
    pub client_cpu_us_per_req: f64,
    pub client_req_per_core_s: f64,
}

pub async fn ceiling(secs: f64) -> Result<LoadgenCheck> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stub = std::thread::Builder::new()
        .name("bench-stub".into())
        .spawn(move || run_stub(ready_tx, stop_rx))?;
    let (addr, tid) = ready_rx.recv().map_err(|_| anyhow!("stub thread died"))??;
    let url = format!("http://{addr}");
    let workers = (0..CLIENTS)
        .map(|_| workload::Worker::Cairn(Worker::stub(&url, Duration::from_secs(5))))
        .collect();
    let spec = PointSpec {
        workload: Workload::ReadLinearizable,
        clients: CLIENTS,
        value_bytes: 256,
        keys: 100_000,
        warmup: Duration::from_millis(300),
        measure: Duration::from_secs_f64(secs),
        op_timeout: Duration::from_secs(5),
    };
    let stub_cpu = || sysinfo::thread_cpu_s(tid).unwrap_or(0.0);
    let (cpu0, stub0, t0) = (sysinfo::self_cpu_s(), stub_cpu(), Instant::now());
    let r = workload::run_point(spec, workers, 1).await;
    let (cpu1, stub1, wall) = (
        sysinfo::self_cpu_s(),
        stub_cpu(),
        t0.elapsed().as_secs_f64(),
    );
    let _ = stop_tx.send(());
    let _ = stub.join();
    let r = r?;
    let client_cpu = (cpu1 - cpu0) - (stub1 - stub0);
    // Requests completed over the whole run (warm-up included), to match the CPU interval.
    let requests = r.ops_per_s() * wall;
    let per_req = client_cpu * 1e6 / requests.max(1.0);
    Ok(LoadgenCheck {
        clients: CLIENTS,
        ops_per_s: r.ops_per_s(),
        p50_ms: r.hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: r.hist.value_at_quantile(0.99) as f64 / 1000.0,
        client_cores: client_cpu / wall,
        client_cpu_us_per_req: per_req,
        client_req_per_core_s: 1e6 / per_req.max(1e-9),
    })
}

/// The stub server's thread: its own single-threaded runtime, so its CPU is its thread's.
/// Reports (address, thread id) or why it could not start on `ready`; serves until `stop`.
fn run_stub(
    ready_tx: mpsc::Sender<Result<(std::net::SocketAddr, libc::pid_t)>>,
    stop_rx: tokio::sync::oneshot::Receiver<()>,
) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = ready_tx.send(Err(anyhow!("stub runtime: {e}")));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                let _ = ready_tx.send(Err(anyhow!("stub bind: {e}")));
                return;
            }
        };
        let _ = ready_tx.send(listener.local_addr().map(|a| (a, tid)).map_err(Into::into));
        let accept = async {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = stop_rx => {}
        }
    });
}

/// Minimal keep-alive HTTP/1.1: read headers and a Content-Length body, answer 200.
async fn serve(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let body = format!(
        r#"{{"key":"bench/k0000001","state":"active","version":1,"generation":1,"forget_epoch":0,"revision":2,"create_revision":2,"value":"{}","meta":{{"actor":"bench","source":null,"anchors":[],"tags":[],"updated_at":1}},"stale":[],"rendered":"[bench/k0000001] x","served":{{"node_id":1,"role":"leader","consistency":"linearizable","applied_index":2,"leader_commit_index":2,"ms_since_leader_contact":0}}}}"#,
        "v".repeat(256)
    );
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // One request: headers, then Content-Length bytes of body.
        let (head_end, content_length) = loop {
            if let Some(pos) = find(&buf, b"\r\n\r\n") {
                break (pos + 4, content_length(&buf[..pos]));
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        while buf.len() < head_end + content_length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + content_length);
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Content-Length of a request head (hyper sends header names in lower case).
fn content_length(head: &[u8]) -> usize {
    let Some(at) = find(head, b"content-length:").or_else(|| find(head, b"Content-Length:")) else {
        return 0;
    };
    head[at + 15..]
        .iter()
        .skip_while(|b| **b == b' ')
        .take_while(|b| b.is_ascii_digit())
        .fold(0, |n, b| n * 10 + (b - b'0') as usize)
}
