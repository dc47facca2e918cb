//! The linearizability checker against other systems' histories with published verdicts
//! (porcupine's test data, see `testdata/README.md`). A disagreement means the checker is
//! wrong until proven otherwise; `Unknown` (budget exhausted) counts as a disagreement.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_jepsen::check::{check_file, Budget, Format, Verdict};

/// Found through the `CARGO_MANIFEST_DIR` cargo sets when the test runs: clones sharing a
/// target directory share builds, so the compile-time value may name another clone.
fn porcupine_dir() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo test");
    Path::new(&dir).join("testdata/porcupine")
}

/// `verdicts.tsv` rows: (file relative to `porcupine/`, expected linearizable).
fn expected_verdicts() -> Vec<(String, bool)> {
    let tsv = std::fs::read_to_string(porcupine_dir().join("verdicts.tsv")).expect("verdicts.tsv");
    tsv.lines()
        .skip(1) // header
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (file, verdict) = line.split_once('\t').expect("file<TAB>verdict");
            let linearizable = match verdict.trim() {
                "true" => true,
                "false" => false,
                other => panic!("{file}: verdict {other:?}"),
            };
            (file.to_string(), linearizable)
        })
        .collect()
}

fn format_of(file: &str) -> Format {
    match file.split('/').next() {
        Some("jepsen-etcd") => Format::JepsenEtcd,
        Some("kv") => Format::Kv,
        _ => panic!("{file}: no format for this directory"),
    }
}

#[test]
fn every_peer_history_gets_its_published_verdict() {
    let rows = expected_verdicts();
    assert!(
        rows.len() >= 50,
        "verdicts.tsv has only {} rows",
        rows.len()
    );
    let started = Instant::now();
    let mut mismatches = Vec::new();
    for (file, expected) in &rows {
        let t = Instant::now();
        let verdict = check_file(
            format_of(file),
            &porcupine_dir().join(file),
            Budget::default(),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let got = verdict.is_linearizable();
        let label = match &verdict {
            Verdict::Linearizable => "linearizable",
            Verdict::NotLinearizable(_) => "not linearizable",
            Verdict::Unknown(_) => "UNKNOWN",
        };
        println!("{file}\t{label}\t{:.1?}", t.elapsed());
        let unknown = matches!(verdict, Verdict::Unknown(_));
        if got != *expected || unknown {
            mismatches.push(format!(
                "{file}: expected linearizable={expected}, got {verdict}"
            ));
        }
    }
    println!("{} histories in {:.1?}", rows.len(), started.elapsed());
    assert!(
        mismatches.is_empty(),
        "verdict mismatches:\n{}",
        mismatches.join("\n")
    );
}
