//! Where a run keeps its files: `store/<UTC time>/` under the repository root
//! (gitignored), and the machine-wide lock that keeps two chaos runs apart.
//!
//! Two runs at once would fight over the same loopback addresses, ports and iptables
//! chain, so every run holds an exclusive `flock` on [`LOCK_PATH`] for its whole life. The
//! kernel drops the lock when the process dies, however it dies.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

/// Shared by every chaos run on the machine.
pub const LOCK_PATH: &str = "/tmp/cairn-jepsen.lock";
const LOCK_POLL: Duration = Duration::from_millis(200);

/// The repository root, found when the run starts: the first of these that holds
/// `jepsen-like-tests/Cargo.toml`, else the current directory (so a binary run outside
/// any checkout writes `./store/`):
///
/// - the parent of `$CARGO_MANIFEST_DIR`, which cargo sets for `cargo test` and `cargo run`
///   (every workspace crate is a child of the root);
/// - the current directory or one of its ancestors.
///
/// Never the directory the crate was compiled in: clones share a target directory (the
/// scripts' default, `$HOME/.cache/cairn/target`) and so share builds, and a prebuilt
/// binary would write into whichever checkout built it, even one since deleted.
pub fn repo_root() -> PathBuf {
    let cargo_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    repo_root_from(cargo_dir.as_deref(), &cwd)
}

/// [`repo_root`] from cargo's crate directory (if cargo set one) and the current directory.
fn repo_root_from(cargo_dir: Option<&Path>, cwd: &Path) -> PathBuf {
    cargo_dir
        .and_then(Path::parent)
        .into_iter()
        .chain(cwd.ancestors())
        .find(|dir| dir.join("jepsen-like-tests/Cargo.toml").is_file())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// `store/` at the repository root.
pub fn default_store() -> PathBuf {
    repo_root().join("store")
}

/// A fresh `<store>/<UTC time>[-tag]/` directory.
pub fn run_dir(store: &Path, tag: &str) -> Result<PathBuf> {
    let stamp = utc_stamp(SystemTime::now());
    for attempt in 0..100u32 {
        let mut name = stamp.clone();
        if !tag.is_empty() {
            name.push('-');
            name.push_str(tag);
        }
        if attempt > 0 {
            name.push_str(&format!("-{attempt}"));
        }
        let dir = store.join(name);
        if !dir.exists() {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            return Ok(dir);
        }
    }
    bail!("no free run directory under {}", store.display())
}

/// `YYYYMMDDTHHMMSSZ` (UTC), from the civil-from-days algorithm (no date crate needed).
pub fn utc_stamp(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's days_from_civil inverse.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!("{y:04}{mo:02}{d:02}T{h:02}{m:02}{s:02}Z")
}

/// The machine-wide run lock; released when dropped or when the process dies.
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Waits up to `timeout` for the lock.
    pub fn acquire(timeout: Duration) -> Result<RunLock> {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_PATH)
            .with_context(|| format!("opening {LOCK_PATH}"))?;
        let started = Instant::now();
        let mut announced = false;
        loop {
            // SAFETY: flock on a descriptor we own.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(RunLock { _file: file });
            }
            if started.elapsed() > timeout {
                bail!("another chaos run holds {LOCK_PATH} for more than {timeout:?}");
            }
            if !announced {
                eprintln!("chaos: waiting for another chaos run to finish ({LOCK_PATH})");
                announced = true;
            }
            std::thread::sleep(LOCK_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkout: `root/jepsen-like-tests/Cargo.toml` and a subdirectory to stand in.
    fn checkout(parent: &Path) -> PathBuf {
        let root = parent.join("cairn");
        std::fs::create_dir_all(root.join("jepsen-like-tests")).unwrap();
        std::fs::create_dir_all(root.join("memory/src")).unwrap();
        std::fs::write(root.join("jepsen-like-tests/Cargo.toml"), "").unwrap();
        root
    }

    #[test]
    fn the_store_is_in_cargos_checkout_else_the_current_ones_else_here() {
        let tmp = tempfile::tempdir().unwrap();
        let root = checkout(tmp.path());
        let other = checkout(&tmp.path().join("other"));
        let outside = tmp.path().join("elsewhere/deeper");
        std::fs::create_dir_all(&outside).unwrap();
        let crate_dir = root.join("jepsen-like-tests");

        // Cargo's crate directory wins, wherever the current directory is.
        assert_eq!(repo_root_from(Some(&crate_dir), &outside), root);
        assert_eq!(repo_root_from(Some(&crate_dir), &other), root);
        // Without cargo: the checkout the current directory is in, at any depth.
        assert_eq!(repo_root_from(None, &root.join("memory/src")), root);
        assert_eq!(repo_root_from(None, &other), other);
        // A cargo directory that is no checkout (e.g. since deleted) is skipped.
        let gone = tmp.path().join("gone/jepsen-like-tests");
        assert_eq!(repo_root_from(Some(&gone), &other), other);
        // Outside any checkout: the current directory itself, never the checkout this
        // binary happened to be compiled in.
        assert_eq!(repo_root_from(None, &outside), outside);
        assert_eq!(repo_root_from(Some(&gone), &outside), outside);
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29 12:34:56
        assert_eq!(utc_stamp(t), "20240229T123456Z");
    }
}
