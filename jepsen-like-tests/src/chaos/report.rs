//! `results.json` (every checker's verdict with counts, operations by workload, kind and
//! outcome, faults by kind, nemesis intervals, probes) and the console summary, whose
//! last line is `N passed, M failed` over the checkers.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;

use super::checkers::Verdict;
use super::final_state::FinalState;
use super::history::{NemesisInterval, Outcome, Probe, Record};
use super::options::RunOptions;

pub struct Summary<'a> {
    pub opts: &'a RunOptions,
    pub records: &'a [Record],
    pub verdicts: &'a [Verdict],
    pub nemesis: &'a [NemesisInterval],
    pub fault_counts: &'a BTreeMap<String, u64>,
    pub skipped_faults: &'a [String],
    pub probes: &'a [Probe],
    pub final_state: &'a FinalState,
    pub cleanup_errors: &'a [String],
    pub elapsed: Duration,
}

#[derive(Default, Serialize)]
struct Counts {
    total: usize,
    ok: usize,
    fail: usize,
    info: usize,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        self.total += 1;
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Info => self.info += 1,
        }
    }
}

fn operation_counts(records: &[Record]) -> serde_json::Value {
    let mut all = Counts::default();
    let mut by_workload: BTreeMap<String, Counts> = BTreeMap::new();
    let mut by_kind: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut resent = 0;
    for r in records {
        all.add(r.outcome);
        let workload = serde_json::to_value(r.workload).unwrap_or_default();
        by_workload
            .entry(workload.as_str().unwrap_or("?").to_string())
            .or_default()
            .add(r.outcome);
        by_kind.entry(r.input.name()).or_default().add(r.outcome);
        if let Some(code) = r.error_code() {
            *errors.entry(code.to_string()).or_default() += 1;
        }
        resent += r.attempts as usize - 1;
    }
    json!({"all": all, "by_workload": by_workload, "by_kind": by_kind,
           "error_codes": errors, "resends": resent})
}

pub fn passed_failed(verdicts: &[Verdict]) -> (usize, usize) {
    let passed = verdicts.iter().filter(|v| v.passed).count();
    (passed, verdicts.len() - passed)
}

pub fn write(dir: &Path, s: &Summary) -> Result<()> {
    let (passed, failed) = passed_failed(s.verdicts);
    let faults_total: u64 = s.fault_counts.values().sum();
    let results = json!({
        "passed": failed == 0 && s.cleanup_errors.is_empty(),
        "checkers_passed": passed,
        "checkers_failed": failed,
        "seed": s.opts.seed,
        "options": s.opts,
        "elapsed_s": s.elapsed.as_secs_f64(),
        "operations": operation_counts(s.records),
        "faults": {"total": faults_total, "by_kind": s.fault_counts, "skipped": s.skipped_faults},
        "nemesis": s.nemesis,
        "probes": s.probes,
        "final_state": s.final_state,
        "cleanup_errors": s.cleanup_errors,
        "checkers": s.verdicts,
    });
    write_json(&dir.join("results.json"), &results)?;
    // Every key's history as the leader reported it: each event names the request that
    // made it (actor `chaos/<request_id>`), which is what a failed checker is read with.
    write_json(&dir.join("key-histories.json"), &s.final_state.histories)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn print(s: &Summary, dir: &Path) {
    let mut counts = Counts::default();
    for r in s.records {
        counts.add(r.outcome);
    }
    let faults: Vec<String> = s
        .fault_counts
        .iter()
        .map(|(k, n)| format!("{k}×{n}"))
        .collect();
    let resent = s.records.iter().filter(|r| r.attempts > 1).count();
    println!(
        "chaos: seed {}, {} nodes, {:.0}s, {} operations ({} ok, {} fail, {} info); {} needed \
         a resend under their request_id ({} of {} left indeterminate resolved at the end); \
         faults: {}",
        s.opts.seed,
        s.opts.nodes,
        s.elapsed.as_secs_f64(),
        counts.total,
        counts.ok,
        counts.fail,
        counts.info,
        resent,
        s.final_state.resolved,
        s.final_state.resent,
        if faults.is_empty() {
            "none".into()
        } else {
            faults.join(" ")
        }
    );
    for v in s.verdicts {
        println!(
            "  {} {:32} checked {:>7}{}",
            if v.passed { "PASS" } else { "FAIL" },
            v.name,
            v.checked,
            if v.passed {
                String::new()
            } else {
                format!(", {} violation(s)", v.violation_count)
            }
        );
        for note in &v.notes {
            println!("       {note}");
        }
        for violation in &v.violations {
            println!("       ! {}", violation.replace('\n', "\n         "));
        }
    }
    for e in s.cleanup_errors {
        println!("  CLEANUP FAILED: {e}");
    }
    println!("  report: {}", dir.display());
    let (passed, failed) = passed_failed(s.verdicts);
    println!("{passed} passed, {failed} failed");
}
