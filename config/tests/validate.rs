//! Each validation rule rejects with a message that starts with the field it is about.

use cairn_config::{ConfigError, NodeConfig, Overrides};

/// Loads `id = 1` plus `extra`; expects an `Invalid` error about `field`.
fn rejects(extra: &str, field: &str, needle: &str) {
    let text = format!("id = 1\n{extra}\n");
    let err = match NodeConfig::from_toml_str(&text, &Overrides::default()) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Invalid { .. }), "{msg}");
    assert_eq!(err.field(), Some(field), "{msg}");
    assert!(msg.starts_with(&format!("{field}: ")), "{msg}");
    assert!(msg.contains(needle), "{msg} lacks {needle:?}");
}

#[test]
fn election_timeout_max_over_1500_is_rejected_with_the_exact_message() {
    let err = NodeConfig::from_toml_str(
        "id = 1\n[raft]\nelection_timeout_max_ms = 5000\n",
        &Overrides::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "raft.election_timeout_max_ms: must be <= 1500 (got 5000)"
    );
}

#[test]
fn top_level_fields() {
    let ov = Overrides::default();
    let err = NodeConfig::from_toml_str("id = 0\n", &ov).unwrap_err();
    assert_eq!(
        err.to_string(),
        "id: must be from 1 to 9007199254740991 (2^53 - 1; got 0)"
    );
    // One past the largest id every JSON reader holds exactly, and the largest u64 (whose
    // default port would overflow), as `--id` can give it (TOML integers stop at 2^63).
    let err = NodeConfig::from_toml_str("id = 9007199254740992\n", &ov).unwrap_err();
    assert_eq!(err.field(), Some("id"), "{err}");
    let flag = Overrides {
        id: Some(u64::MAX),
        ..Overrides::default()
    };
    let err = NodeConfig::from_toml_str("", &flag).unwrap_err();
    assert_eq!(err.field(), Some("id"), "{err}");
    let largest = "id = 9007199254740991\nclient_addr = \"127.0.0.1:7401\"\n\
                   peer_addr = \"127.0.0.1:7501\"\n";
    NodeConfig::from_toml_str(largest, &ov).expect("the largest id");
    let err = NodeConfig::from_toml_str("id = 1\ndata_dir = \"\"\n", &ov).unwrap_err();
    assert_eq!(err.field(), Some("data_dir"));
    rejects("client_addr = \"localhost\"", "client_addr", "HOST:PORT");
    rejects(
        "client_addr = \"no-such-host.invalid:7401\"",
        "client_addr",
        "does not resolve",
    );
    rejects(
        "client_addr = \"127.0.0.1\"",
        "client_addr",
        "\"127.0.0.1\"",
    );
    rejects("peer_addr = \"127.0.0.1:99999\"", "peer_addr", "HOST:PORT");
    rejects("peer_addr = \"127.0.0.1:7401\"", "peer_addr", "differ");
    rejects("dedup_retention_ms = 0", "dedup_retention_ms", "> 0");
    rejects("log_level = \"\"", "log_level", "tracing filter");
    rejects("log_level = \"info debug\"", "log_level", "tracing filter");
    rejects("worker_threads = 1025", "worker_threads", "<= 1024");
    rejects("slot_cache_mib = 1048577", "slot_cache_mib", "<= 1048576");
    let named = "id = 1\nclient_addr = \"localhost:7401\"\npeer_addr = \"localhost:7501\"\n";
    let named = NodeConfig::from_toml_str(named, &ov).expect("HOST:PORT with a host name");
    assert!(named.client_socket_addr().unwrap().ip().is_loopback());
    assert!(
        named.exposed_without_tls().is_empty(),
        "localhost is loopback: no TLS needed"
    );
    let off = NodeConfig::from_toml_str("id = 1\nslot_cache_mib = 0\n", &ov).unwrap();
    assert_eq!(off.slot_cache_mib, 0, "0 (no cache) is a valid setting");
    rejects(
        "blob_min_bytes = 1073741825",
        "blob_min_bytes",
        "<= 1073741824",
    );
    let inline = NodeConfig::from_toml_str("id = 1\nblob_min_bytes = 0\n", &ov).unwrap();
    assert_eq!(
        inline.blob_min_bytes, 0,
        "0 (no blob files) is a valid setting"
    );
}

#[test]
fn ipv6_is_accepted_and_port_zero_refused() {
    let text = "id = 1\nclient_addr = \"[::1]:7401\"\npeer_addr = \"[::1]:7501\"\n";
    NodeConfig::from_toml_str(text, &Overrides::default()).unwrap();
    // Port 0 would bind another port at every start: no address peers could reach.
    for (client, peer, field) in [
        ("[::1]:0", "[::1]:7501", "client_addr"),
        ("127.0.0.1:7401", "localhost:0", "peer_addr"),
    ] {
        let text = format!("id = 1\nclient_addr = \"{client}\"\npeer_addr = \"{peer}\"\n");
        let err = NodeConfig::from_toml_str(&text, &Overrides::default()).unwrap_err();
        assert_eq!(err.field(), Some(field), "{text}: {err}");
    }
}

#[test]
fn invalid_override_is_rejected_too() {
    let ov = Overrides {
        id: Some(1),
        client_addr: Some("nope".into()),
        ..Overrides::default()
    };
    let err = NodeConfig::load(None, &ov).unwrap_err();
    assert_eq!(err.field(), Some("client_addr"));
}

#[test]
fn raft_section() {
    for field in [
        "heartbeat_interval_ms",
        "election_timeout_min_ms",
        "election_timeout_max_ms",
        "install_snapshot_timeout_ms",
        "rpc_timeout_ms",
        "max_payload_entries",
        "max_payload_bytes",
        "snapshot_logs_since_last",
        "snapshot_log_bytes",
        "snapshot_chunk_bytes",
        "join_catch_up_timeout_ms",
    ] {
        let dotted = format!("raft.{field}");
        rejects(&format!("[raft]\n{field} = 0"), &dotted, "must be > 0");
    }
    rejects(
        "[raft]\nheartbeat_interval_ms = 400",
        "raft.election_timeout_min_ms",
        "must be > raft.heartbeat_interval_ms (400) (got 400)",
    );
    rejects(
        "[raft]\nelection_timeout_min_ms = 800",
        "raft.election_timeout_max_ms",
        "must be > raft.election_timeout_min_ms (800) (got 800)",
    );
    rejects(
        "[raft]\nelection_timeout_min_ms = 1000\nelection_timeout_max_ms = 1501",
        "raft.election_timeout_max_ms",
        "must be <= 1500 (got 1501)",
    );
    rejects(
        "[raft]\nsnapshot_chunk_bytes = 100000000",
        "raft.snapshot_chunk_bytes",
        "must be <= 67108864",
    );
    rejects(
        "[raft]\njoin_catch_up_timeout_ms = 3600001",
        "raft.join_catch_up_timeout_ms",
        "must be <= 3600000",
    );
    rejects(
        "[raft]\nmax_payload_bytes = 67108865",
        "raft.max_payload_bytes",
        "must be <= 67108864",
    );
    rejects(
        "[raft]\nsnapshot_log_bytes = 1099511627777",
        "raft.snapshot_log_bytes",
        "must be <= 1099511627776",
    );
}

#[test]
fn raft_boundaries_are_accepted() {
    let text = "id = 1\n[raft]\nheartbeat_interval_ms = 1\nelection_timeout_min_ms = 2\n\
                election_timeout_max_ms = 1500\npurge_keep_logs = 0\n\
                snapshot_log_bytes = 1099511627776\n";
    NodeConfig::from_toml_str(text, &Overrides::default()).unwrap();
}

#[test]
fn batching_section() {
    rejects("[batching]\nops_max = 0", "batching.ops_max", "must be > 0");
    rejects(
        "[batching]\nbytes_max = 0",
        "batching.bytes_max",
        "must be > 0",
    );
    rejects(
        "[batching]\nbytes_max = 67108865",
        "batching.bytes_max",
        "must be <= 67108864",
    );
    rejects(
        "[batching]\ninflight_entries_max = 0",
        "batching.inflight_entries_max",
        "must be > 0",
    );
    rejects(
        "[batching]\nqueue_ops_max = 0",
        "batching.queue_ops_max",
        "must be > 0",
    );
    rejects(
        "[batching]\nlinger_us = 100001",
        "batching.linger_us",
        "must be <= 100000",
    );
    rejects(
        "[batching]\ncommit_timeout_ms = 20001",
        "batching.commit_timeout_ms",
        "must be <= 20000",
    );
    rejects(
        "[batching]\ncommit_timeout_ms = 800",
        "batching.commit_timeout_ms",
        "must be > raft.election_timeout_max_ms (800)",
    );
    rejects(
        "[batching]\nops_max = 2048\nqueue_ops_max = 2000",
        "batching.queue_ops_max",
        "must be >= batching.ops_max (2048)",
    );
    rejects(
        "[batching]\nops_max = 999",
        "batching.ops_max",
        "limits.batch_ops_max (1000)",
    );
    rejects(
        "[batching]\nbytes_max = 1000",
        "batching.bytes_max",
        "limits.value_bytes_max (1048576)",
    );
    let ok = "id = 1\n[batching]\nlinger_us = 0\n";
    NodeConfig::from_toml_str(ok, &Overrides::default()).unwrap();
}

#[test]
fn reads_section() {
    rejects(
        "[reads]\ntoken_refresh_ms = 0",
        "reads.token_refresh_ms",
        "must be > 0",
    );
    rejects(
        "[reads]\nmin_revision_wait_ms = 0",
        "reads.min_revision_wait_ms",
        "must be > 0",
    );
    rejects(
        "[reads]\nmin_revision_wait_ms = 60001",
        "reads.min_revision_wait_ms",
        "must be <= 60000",
    );
    rejects(
        "[reads]\ndefault_max_staleness_ms = 0",
        "reads.default_max_staleness_ms",
        "must be > 0",
    );
    rejects(
        "[reads]\ntoken_refresh_ms = 1000",
        "reads.token_refresh_ms",
        "must be < reads.default_max_staleness_ms (1000) (got 1000)",
    );
}

#[test]
fn limits_section() {
    for field in [
        "key_bytes_max",
        "value_bytes_max",
        "actor_bytes_max",
        "reason_bytes_max",
        "anchors_max",
        "anchor_bytes_max",
        "tags_max",
        "tag_bytes_max",
        "source_bytes_max",
        "request_id_bytes_max",
        "batch_ops_max",
        "page_items_max",
        "cues_max",
    ] {
        let dotted = format!("limits.{field}");
        rejects(&format!("[limits]\n{field} = 0"), &dotted, "must be > 0");
    }
    rejects(
        "[limits]\nkey_bytes_max = 4097",
        "limits.key_bytes_max",
        "must be <= 4096 (got 4097)",
    );
    rejects(
        "[limits]\nvalue_bytes_max = 67108865\n[batching]\nbytes_max = 67108864",
        "limits.value_bytes_max",
        "must be <= 67108864",
    );
    rejects(
        "[limits]\nbatch_ops_max = 100001\n[batching]\nops_max = 200000\nqueue_ops_max = 200000",
        "limits.batch_ops_max",
        "must be <= 100000",
    );
    rejects(
        "[limits]\npage_items_max = 100001",
        "limits.page_items_max",
        "must be <= 100000",
    );
    let ok = "id = 1\n[limits]\nkey_bytes_max = 4096\n";
    NodeConfig::from_toml_str(ok, &Overrides::default()).unwrap();
}
