//! The planted-bug self-test: builds `cairn-node --features planted-bugs` (and restores
//! the normal binary), then for each planted bug runs a short scenario on a fresh
//! cluster with that bug switched on; a checker aimed at the bug must fail every time.
//!
//! Needs root and iptables ([`prereq`]): under CI (`CI=true`) the test fails without them,
//! elsewhere it skips loudly. For development:
//! `CAIRN_CHAOS_BUGS=a,b` picks bugs, `CAIRN_CHAOS_CONTROL=1` also runs each scenario on
//! the normal binary (which must pass), `CAIRN_CHAOS_NO_BUILD=1` reuses an existing
//! `cairn-node-planted`.

use cairn_jepsen::chaos::cli::{self, SelftestOptions};
use cairn_jepsen::prereq::{self, Prereq};

#[test]
fn planted_bugs_are_caught() {
    if !prereq::require("planted_bugs_are_caught", &[Prereq::RootAndIptables]) {
        return;
    }
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let opts = SelftestOptions {
        bugs: std::env::var("CAIRN_CHAOS_BUGS")
            .map(|b| b.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
        control: flag("CAIRN_CHAOS_CONTROL"),
        build: !flag("CAIRN_CHAOS_NO_BUILD"),
        ..SelftestOptions::default()
    };
    let all_caught = cli::planted_selftest(opts).expect("the self-test could not run");
    assert!(
        all_caught,
        "a planted bug was not caught (see the table above)"
    );
}
