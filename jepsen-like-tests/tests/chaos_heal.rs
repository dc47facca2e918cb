//! The chaos run's safety net: after heals that failed, [`Nemesis::heal_all`] brings the
//! cluster back to its base voters, so the next fault starts from the membership the
//! schedule assumes (a fault that wipes the extra node while it is still a voter would
//! break Raft's assumptions, and the checkers would blame the cluster).
//!
//! Real processes on 127.0.0.11-14, no workload: the membership a failed heal leaves is
//! made by hand, then healed, then judged by the nodes' own `/cluster/status` and by the
//! run's final-state checks. Needs root and iptables, like `chaos_smoke`.
//!
//! [`Nemesis::heal_all`]: cairn_jepsen::chaos::nemesis::Nemesis::heal_all

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use cairn_jepsen::chaos::cli::RunOptions;
use cairn_jepsen::chaos::harness::Harness;
use cairn_jepsen::prereq::{self, Prereq};
use rand::rngs::StdRng;
use rand::SeedableRng;

/// A membership change waits for a commit, a join also for the learner to catch up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Until every base node's own status shows the restored membership.
const AGREE_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn heal_all_restores_the_base_voters_after_failed_heals() {
    if !prereq::require("chaos_heal", &[Prereq::RootAndIptables]) {
        return;
    }
    let opts = RunOptions {
        nemeses: Vec::new(),
        duration_ms: 0,
        node_bin: common::node_bin(),
        ..RunOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let harness = Harness::start(opts, "chaos_heal").await.unwrap();
        let mut nemesis = harness.nemesis(StdRng::seed_from_u64(7));
        let cluster = harness.cluster.clone();
        let supervisor = harness.supervisor.clone();
        assert_eq!(cluster.base, vec![1, 2, 3]);

        // What a failed rejoin leaves: base voter 2 removed, stopped and wiped.
        cluster.remove(2, CHANGE_TIMEOUT).await.unwrap();
        supervisor.kill9(2).unwrap();
        supervisor.wipe(2).unwrap();
        // What a failed drop leaves: the extra node 4 still a voter.
        nemesis.start_wiped(4).await.unwrap();
        cluster.join(4, CHANGE_TIMEOUT).await.unwrap();
        assert_eq!(cluster.members(), vec![1, 3, 4]);

        nemesis.heal_all().await.expect("heal_all");

        assert_eq!(cluster.members(), vec![1, 2, 3]);
        assert!(!supervisor.is_running(4), "the extra node is stopped");
        for id in [1, 2, 3] {
            wait_for_membership(&harness, id).await;
        }
        let report = harness.finish(&mut nemesis).await.unwrap();
        assert!(
            report.passed(),
            "the final-state checks failed: {:?}, cleanup {:?} (report in {})",
            report.failed(),
            report.cleanup_errors,
            report.dir.display()
        );
    });
}

/// Polls node `id` until its own status lists voters 1, 2, 3 and no learners.
async fn wait_for_membership(harness: &Harness, id: u64) {
    let started = Instant::now();
    let mut last = String::from("no answer");
    while started.elapsed() < AGREE_TIMEOUT {
        match harness.cluster.status(id).await {
            Ok(s) if s.voters == [1, 2, 3] && s.learners.is_empty() => return,
            Ok(s) => last = format!("voters {:?}, learners {:?}", s.voters, s.learners),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("node {id} never showed voters [1, 2, 3] and no learners: {last}");
}
