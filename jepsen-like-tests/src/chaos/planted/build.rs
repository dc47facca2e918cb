//! Building the planted-bugs node binary next to the normal one.
//!
//! `cargo build --workspace --bin cairn-node --features cairn-node/planted-bugs`, copy the
//! binary to `<target>/debug/cairn-node-planted`, then build without the feature again so
//! the normal binary is back in place. The restore runs even when the planted build failed.
//!
//! Always `--workspace`: a per-package build (`-p cairn-node`) resolves dependency
//! features for the node alone, and bindgen's `regex` (a build dependency of RocksDB) then
//! gets other features than in the test suite's workspace build, so RocksDB would compile
//! a second time (~20 min on 2 cores). The `planted-bugs` feature changes no dependency.
//!
//! The binary is taken from cargo's own report (`--message-format json`, the
//! `executable` of the `cairn-node` artifact), not from `<target>/debug/cairn-node`:
//! cargo keeps both feature sets' artifacts under `deps/` and does not always re-link
//! the shared `debug/cairn-node` when a build is fresh, so that path may hold either one.
//! After the normal build, `debug/cairn-node` is replaced (write + rename, safe while it
//! runs) if it is not the normal binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::chaos::options::target_dir;
use crate::chaos::store::repo_root;

/// Other builds may hold the cargo lock for a while on a busy machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1_200);

/// Text only a planted-bugs build contains (`node/src/planted.rs`).
const MARKER: &[u8] = b"PLANTED BUG ACTIVE";

pub fn planted_bin() -> PathBuf {
    target_dir().join("debug/cairn-node-planted")
}

fn wait(mut child: Child, what: &str) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{what} failed ({status})");
            }
            return Ok(());
        }
        if started.elapsed() > BUILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {BUILD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Variables cargo sets for the test process this runs in (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_NAME`, ...), which a nested cargo must not inherit: build scripts that
/// track one of them (ring's tracks `CARGO_MANIFEST_DIR`) would see it change between
/// this build and the suite's own, rerun, and recompile ring and everything above it
/// on both sides, once per chaos test (measured: a 138 s rebuild of ring, rustls,
/// reqwest and the cairn crates after `cargo test` in CI).
fn is_test_process_var(name: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "CARGO_MANIFEST_",
        "CARGO_PKG_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || name == "CARGO_RUSTC_CURRENT_DIR"
}

/// Builds `cairn-node` (with `features`) and returns the executable cargo reports.
fn cargo_build(features: Option<&str>) -> Result<PathBuf> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_test_process_var) {
            cmd.env_remove(name);
        }
    }
    cmd.current_dir(repo_root())
        .env("CARGO_TARGET_DIR", target_dir())
        .args(["build", "--workspace", "--bin", "cairn-node"])
        .args(["--message-format", "json-render-diagnostics"])
        .stdout(Stdio::piped());
    if let Some(f) = features {
        cmd.args(["--features", f]);
    }
    let what = format!(
        "cargo build --workspace --bin cairn-node{}",
        features
            .map(|f| format!(" --features {f}"))
            .unwrap_or_default()
    );
    eprintln!("chaos: {what}");
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    // Drained on its own thread so cargo never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut executable = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == "cairn-node" {
                if let Some(exe) = msg["executable"].as_str() {
                    executable = Some(PathBuf::from(exe));
                }
            }
        }
        executable
    });
    wait(child, &what)?;
    let exe = reader
        .join()
        .map_err(|_| anyhow!("reader thread panicked"))?
        .ok_or_else(|| anyhow!("{what} reported no cairn-node executable"))?;
    Ok(exe)
}

/// Copies `from` over `to` atomically (write a sibling, rename), so a running `to` is
/// never half-written.
fn replace(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("chaos-tmp");
    std::fs::copy(from, &tmp)
        .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("renaming to {}", to.display()))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::read(a), std::fs::read(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Fails unless `exe` is a planted-bugs build: the warning a planted node logs exists only
/// in those. A bug asked of a normal node is planted nowhere, and its run would pass
/// like any other, looking like a bug the checkers missed.
pub fn require_planted(exe: &Path) -> Result<()> {
    let bytes = std::fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    if !bytes.windows(MARKER.len()).any(|w| w == MARKER) {
        bail!(
            "{} has no planted bugs compiled in: pass --node-bin {} (`cairn-jepsen selftest` \
             builds it)",
            exe.display(),
            planted_bin().display()
        );
    }
    Ok(())
}

/// Builds the normal node binary, makes sure `<target>/debug/cairn-node` is it, and
/// returns the path.
pub fn normal() -> Result<PathBuf> {
    let exe = cargo_build(None)?;
    let shared = target_dir().join("debug/cairn-node");
    if !same_file(&exe, &shared) {
        replace(&exe, &shared)?;
    }
    Ok(shared)
}

/// Builds the planted binary and restores the normal one; returns the planted path.
pub fn planted() -> Result<PathBuf> {
    let root = repo_root();
    if !root.join("jepsen-like-tests/Cargo.toml").is_file() {
        bail!(
            "building the planted node needs a cairn checkout, and {} is in none: run from \
             inside one, or pass --no-build with an existing {}",
            root.display(),
            planted_bin().display()
        );
    }
    let built = cargo_build(Some("cairn-node/planted-bugs")).and_then(|exe| {
        require_planted(&exe)?;
        let to = planted_bin();
        replace(&exe, &to)?;
        Ok(to)
    });
    let restored = normal();
    let to = built?;
    restored?;
    Ok(to)
}
