//! The network nemesis: iptables rules in a chain of the suite's own.
//!
//! Every node listens on its own loopback address ([`node_ip`]) and binds its outgoing
//! peer and relay connections to it, so a rule `-s A -d B -j DROP` cuts exactly the
//! packets from node A to node B. Clients connect from 127.0.0.1 and are never cut.
//!
//! Packets between loopback addresses traverse OUTPUT and then INPUT on `lo`; dropping
//! them on INPUT is enough, so the chain is jumped to from INPUT only (`-i lo`). Healing
//! flushes the chain; teardown removes the jump and the chain and [`verify_gone`]
//! checks that nothing is left. A run killed by SIGKILL leaves its rules behind, so
//! [`Net::setup`] first removes whatever an earlier run left.

use std::process::Command;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

pub const CHAIN: &str = "CAIRN-JEPSEN";
/// Jumps removed per cleanup at most (one per leftover run; bounds the loop).
const JUMPS_MAX: usize = 16;

/// The loopback address of node `id`.
pub fn node_ip(id: u64) -> String {
    format!("127.0.0.{}", 10 + id)
}

/// Whether iptables can be used here (root and the binary present).
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not running as root".into());
    }
    match Command::new("iptables").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "iptables --version failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => Err(format!("iptables not found: {e}")),
    }
}

fn iptables(args: &[&str]) -> Result<String> {
    // -w: wait for the xtables lock instead of failing when another process holds it.
    let out = Command::new("iptables")
        .arg("-w")
        .arg("10")
        .args(args)
        .output()
        .context("running iptables")?;
    if !out.status.success() {
        bail!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One directed drop rule: packets from node `from` to node `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cut {
    pub from: u64,
    pub to: u64,
    /// `None`: every packet; `Some(p)`: each packet with probability `p` (lossy link).
    pub probability_pct: Option<u8>,
}

/// The suite's chain. Rules currently installed are remembered for the report.
pub struct Net {
    installed: Mutex<Vec<Cut>>,
}

impl Net {
    /// Removes leftovers of earlier runs, then creates the chain and the INPUT jump.
    pub fn setup() -> Result<Net> {
        remove_chain();
        iptables(&["-N", CHAIN])?;
        iptables(&["-I", "INPUT", "1", "-i", "lo", "-j", CHAIN])?;
        Ok(Net {
            installed: Mutex::new(Vec::new()),
        })
    }

    /// Installs `drops` (in addition to the current ones).
    pub fn apply(&self, cuts: &[Cut]) -> Result<()> {
        for d in cuts {
            let (src, dst) = (node_ip(d.from), node_ip(d.to));
            let mut args = vec!["-A", CHAIN, "-s", &src, "-d", &dst];
            let probability;
            if let Some(pct) = d.probability_pct {
                probability = format!("{:.2}", f64::from(pct) / 100.0);
                args.extend([
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &probability,
                ]);
            }
            args.extend(["-j", "DROP"]);
            iptables(&args)?;
            self.installed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(*d);
        }
        Ok(())
    }

    /// Removes every rule (the chain and its jump stay).
    pub fn heal(&self) -> Result<()> {
        iptables(&["-F", CHAIN])?;
        self.installed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(())
    }

    pub fn installed(&self) -> Vec<Cut> {
        self.installed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Removes the jump and the chain. Idempotent, never panics (called from Drop).
    pub fn teardown(&self) {
        remove_chain();
        self.installed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Deletes every INPUT jump to the chain, flushes it and deletes it; errors mean "not
/// there", which is the goal.
fn remove_chain() {
    for _ in 0..JUMPS_MAX {
        if iptables(&["-D", "INPUT", "-i", "lo", "-j", CHAIN]).is_err() {
            break;
        }
    }
    let _ = iptables(&["-F", CHAIN]);
    let _ = iptables(&["-X", CHAIN]);
}

/// `Ok` when neither the chain nor any reference to it exists.
pub fn verify_gone() -> Result<()> {
    if iptables(&["-S", CHAIN]).is_ok() {
        bail!("iptables chain {CHAIN} still exists");
    }
    let input = iptables(&["-S", "INPUT"])?;
    if input.contains(CHAIN) {
        bail!("INPUT still jumps to {CHAIN}: {input}");
    }
    Ok(())
}
