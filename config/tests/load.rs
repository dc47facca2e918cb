//! Loading files: the example files, overrides, parse errors.

use std::io::Write;
use std::path::{Path, PathBuf};

use cairn_config::{ConfigError, NodeConfig, Overrides};

/// `config/node{i}.toml`, found through the `CARGO_MANIFEST_DIR` cargo sets when the test
/// runs: clones sharing a target directory share builds, so the compile-time value may
/// name another clone.
fn example(i: u64) -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo test");
    Path::new(&dir).join(format!("node{i}.toml"))
}

fn file_with(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// Every key of a TOML document as a dotted path, tables excluded.
fn keys(value: &toml::Value, prefix: &str, out: &mut Vec<String>) {
    if let toml::Value::Table(table) = value {
        for (k, v) in table {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if v.is_table() {
                keys(v, &path, out);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
}

#[test]
fn example_files_load_and_state_the_defaults() {
    for i in 1..=3 {
        let loaded = NodeConfig::load(Some(&example(i)), &Overrides::default())
            .unwrap_or_else(|e| panic!("node{i}.toml: {e}"));
        assert_eq!(loaded, NodeConfig::local(i).unwrap(), "node{i}.toml");
    }
}

#[test]
fn example_files_spell_out_every_field() {
    let all = NodeConfig::local(1).unwrap().to_toml_string().unwrap();
    let mut expected = Vec::new();
    keys(&all.parse().unwrap(), "", &mut expected);
    for i in 1..=3 {
        let text = std::fs::read_to_string(example(i)).unwrap();
        let mut found = Vec::new();
        keys(&text.parse().unwrap(), "", &mut found);
        assert_eq!(found, expected, "node{i}.toml");
    }
}

#[test]
fn a_file_with_only_an_id_gets_defaults() {
    let f = file_with("id = 2\n");
    let c = NodeConfig::load(Some(f.path()), &Overrides::default()).unwrap();
    assert_eq!(c, NodeConfig::local(2).unwrap());
}

#[test]
fn partial_sections_keep_the_other_defaults() {
    let f = file_with("id = 1\n[raft]\nheartbeat_interval_ms = 50\n[limits]\ncues_max = 8\n");
    let c = NodeConfig::load(Some(f.path()), &Overrides::default()).unwrap();
    let d = NodeConfig::local(1).unwrap();
    assert_eq!(c.raft.heartbeat_interval_ms, 50);
    assert_eq!(
        c.raft.election_timeout_max_ms,
        d.raft.election_timeout_max_ms
    );
    assert_eq!(c.limits.cues_max, 8);
    assert_eq!(c.limits.key_bytes_max, d.limits.key_bytes_max);
}

#[test]
fn no_file_and_no_id_is_an_error() {
    let err = NodeConfig::load(None, &Overrides::default()).unwrap_err();
    assert!(matches!(err, ConfigError::MissingId));
    assert!(err.to_string().starts_with("id: "), "{err}");
    let f = file_with("log_level = \"debug\"\n");
    let err = NodeConfig::load(Some(f.path()), &Overrides::default()).unwrap_err();
    assert!(matches!(err, ConfigError::MissingId));
}

#[test]
fn overrides_alone_are_enough() {
    let ov = Overrides {
        id: Some(7),
        data_dir: Some("/tmp/n7".into()),
        client_addr: Some("127.0.0.1:9001".into()),
        peer_addr: Some("127.0.0.1:9002".into()),
        ..Overrides::default()
    };
    let c = NodeConfig::load(None, &ov).unwrap();
    assert_eq!(c.id, 7);
    assert_eq!(c.data_dir, PathBuf::from("/tmp/n7"));
    assert_eq!(c.client_addr, "127.0.0.1:9001");
    assert_eq!(c.peer_addr, "127.0.0.1:9002");
}

#[test]
fn override_beats_file() {
    let ov = Overrides {
        id: Some(5),
        data_dir: Some("/tmp/elsewhere".into()),
        client_addr: Some("127.0.0.1:9101".into()),
        peer_addr: Some("127.0.0.1:9201".into()),
        ..Overrides::default()
    };
    let c = NodeConfig::load(Some(&example(1)), &ov).unwrap();
    assert_eq!(c.id, 5);
    assert_eq!(c.data_dir, PathBuf::from("/tmp/elsewhere"));
    assert_eq!(c.client_addr, "127.0.0.1:9101");
    assert_eq!(c.peer_addr, "127.0.0.1:9201");
    // Fields without an override still come from the file.
    assert_eq!(c.log_level, "info");
}

#[test]
fn one_override_leaves_the_other_file_fields() {
    let ov = Overrides {
        client_addr: Some("127.0.0.1:9301".into()),
        ..Overrides::default()
    };
    let c = NodeConfig::load(Some(&example(2)), &ov).unwrap();
    assert_eq!(c.id, 2);
    assert_eq!(c.client_addr, "127.0.0.1:9301");
    assert_eq!(c.peer_addr, "127.0.0.1:7502");
    assert_eq!(c.data_dir, PathBuf::from("./data/node-2"));
}

#[test]
fn overridden_id_drives_the_defaults_the_file_left_out() {
    let f = file_with("id = 1\n");
    let ov = Overrides {
        id: Some(4),
        ..Overrides::default()
    };
    let c = NodeConfig::load(Some(f.path()), &ov).unwrap();
    assert_eq!(c, NodeConfig::local(4).unwrap());
}

#[test]
fn unknown_top_level_field_is_named() {
    let f = file_with("id = 1\nclient_adr = \"127.0.0.1:7401\"\n");
    let err = NodeConfig::load(Some(f.path()), &Overrides::default()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Parse { .. }), "{msg}");
    assert!(msg.contains("unknown field `client_adr`"), "{msg}");
    assert!(msg.contains(&f.path().display().to_string()), "{msg}");
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn unknown_section_field_is_named() {
    let f = file_with("id = 1\n[raft]\nheartbeat_ms = 100\n");
    let msg = NodeConfig::load(Some(f.path()), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("unknown field `heartbeat_ms`"), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");

    let f = file_with("id = 1\n[limits]\nkeys_max = 1\n");
    let msg = NodeConfig::load(Some(f.path()), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("unknown field `keys_max`"), "{msg}");
}

#[test]
fn unknown_section_is_named() {
    let msg = NodeConfig::from_toml_str("id = 1\n[cluster]\nsize = 3\n", &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("config file <string>: "), "{msg}");
    assert!(msg.contains("unknown field `cluster`"), "{msg}");
}

#[test]
fn bad_toml_reports_path_line_and_column() {
    let f = file_with("id = 1\nlog_level = \"info\n");
    let msg = NodeConfig::load(Some(f.path()), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&f.path().display().to_string()), "{msg}");
    assert!(msg.contains("line 2, column"), "{msg}");
}

#[test]
fn wrong_type_is_reported() {
    let f = file_with("id = 1\n[raft]\nrpc_timeout_ms = \"1s\"\n");
    let msg = NodeConfig::load(Some(f.path()), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("rpc_timeout_ms"), "{msg}");
}

#[test]
fn missing_file_names_the_path() {
    let path = Path::new("/nonexistent/cairn/node9.toml");
    let err = NodeConfig::load(Some(path), &Overrides::default()).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(
        err.to_string().contains("/nonexistent/cairn/node9.toml"),
        "{err}"
    );
}
