//! What a client can hold open on the client port is bounded (SPEC §5, extension): at
//! most `limits.connections_max` connections (past it the node accepts none until one
//! closes), and a connection that has not sent a whole request head within
//! `limits.request_head_timeout_ms` of opening, or of its previous answer, is closed. So
//! idle and half-sent connections cannot take every slot for long, nor every file
//! descriptor.

mod support;

use std::time::{Duration, Instant};

use support::{Cluster, LEADER_TIMEOUT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONNECTIONS_MAX: usize = 4;
const HEAD_TIMEOUT: Duration = Duration::from_millis(1000);
/// Far beyond the head timeout: how long a closed connection may take to show as closed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the node closed `conn`: a read ends (EOF or reset) within `CLOSE_TIMEOUT`.
async fn closed_by_node(mut conn: TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(CLOSE_TIMEOUT, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_and_half_sent_connections_are_bounded_and_closed() {
    let config = format!(
        "[limits]\nconnections_max = {CONNECTIONS_MAX}\nwatchers_max = {CONNECTIONS_MAX}\n\
         request_head_timeout_ms = {}\n",
        HEAD_TIMEOUT.as_millis()
    );
    let cluster = Cluster::builder(1).config(&config).start().await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    // The harness's own pooled connections go idle and are closed by the head timeout.
    tokio::time::sleep(HEAD_TIMEOUT * 2).await;

    let addr = cluster
        .endpoint(1)
        .trim_start_matches("http://")
        .to_string();
    let mut held = Vec::new();
    for i in 0..CONNECTIONS_MAX {
        let mut conn = TcpStream::connect(&addr).await.expect("connect");
        if i % 2 == 0 {
            // Half a request head, never finished.
            conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .await
                .expect("half a head");
        }
        held.push(conn);
    }

    // Every slot is held: a full request waits until the head timeout frees one.
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(CLOSE_TIMEOUT)
        .build()
        .expect("http client");
    let asked = Instant::now();
    let answer = http
        .get(format!("{}/healthz", cluster.endpoint(1)))
        .send()
        .await
        .expect("served once a slot is free");
    let waited = asked.elapsed();
    assert_eq!(answer.status().as_u16(), 200);
    assert!(
        waited >= HEAD_TIMEOUT / 2,
        "answered after {waited:?}, while {CONNECTIONS_MAX} connections held every slot"
    );
    for (i, conn) in held.into_iter().enumerate() {
        assert!(
            closed_by_node(conn).await,
            "connection {i} was closed by the node"
        );
    }

    // Read the gauge on fresh connections until the closed ones are uncounted: a
    // connection the node is closing may still count for a moment, but once they are
    // gone only the one asking is open.
    let fresh = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(CLOSE_TIMEOUT)
        .build()
        .expect("http client");
    let metrics_url = format!("{}/metrics", cluster.endpoint(1));
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    loop {
        let metrics = fresh
            .get(&metrics_url)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        assert!(
            metrics.contains(&format!("cairn_client_connections_max {CONNECTIONS_MAX}\n")),
            "{metrics}"
        );
        let open: usize = metrics
            .lines()
            .find_map(|l| l.strip_prefix("cairn_client_connections_open "))
            .expect("cairn_client_connections_open")
            .parse()
            .expect("a count");
        if open == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} connections counted open; only the one asking for the metrics is"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        cluster
            .log_text(1)
            .contains("every connection slot is taken"),
        "the node said why it stopped accepting"
    );
}

/// A request whose body stops arriving is answered 400 `invalid_request` (`field: "body"`)
/// once `limits.request_body_timeout_ms` passes without a byte of it, and its connection is
/// closed: a client that declares a long body and sends part of it holds no slot for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_body_that_stops_arriving_is_refused_and_its_connection_closed() {
    const BODY_TIMEOUT: Duration = Duration::from_millis(1000);
    let config = format!(
        "[limits]\nrequest_body_timeout_ms = {}\n",
        BODY_TIMEOUT.as_millis()
    );
    let cluster = Cluster::builder(1).config(&config).start().await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let addr = cluster
        .endpoint(1)
        .trim_start_matches("http://")
        .to_string();

    let part = br#"{"key":"t82/stalled","value":1,"actor":"al""#;
    let mut conn = TcpStream::connect(&addr).await.expect("connect");
    let head = "POST /v1/write HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
                content-length: 5000\r\n\r\n";
    conn.write_all(head.as_bytes()).await.expect("head");
    conn.write_all(part).await.expect("part of the body");
    let sent = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(CLOSE_TIMEOUT, conn.read_to_end(&mut answer))
        .await
        .expect("the node answers and closes within the timeout")
        .expect("read the answer");
    let waited = sent.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains(r#""code":"invalid_request""#), "{answer}");
    assert!(answer.contains(r#""field":"body""#), "{answer}");
    assert!(
        answer.contains(&format!(
            "{} bytes of the 5000 declared arrived, then nothing for 1000 ms",
            part.len()
        )),
        "{answer}"
    );
    assert!(
        waited >= BODY_TIMEOUT / 2,
        "answered after {waited:?}, before the body timeout"
    );

    // Nothing was written.
    let read = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client")
        .post(format!("{}/v1/read", cluster.endpoint(1)))
        .json(&serde_json::json!({"key": "t82/stalled"}))
        .send()
        .await
        .expect("read");
    assert_eq!(read.status().as_u16(), 404);
}
