//! The data directory: an exclusive lock and the node id it belongs to.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

const LOCK_FILE: &str = "LOCK.cairn";
const NODE_ID_FILE: &str = "node_id";

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("data dir {dir}: {step}: {source}")]
    Io {
        dir: PathBuf,
        /// What failed: creating the directory, its lock file, or its node id file.
        step: &'static str,
        source: std::io::Error,
    },
    #[error("data dir {0} is in use by another cairn-node process (exclusive lock held)")]
    Locked(PathBuf),
    #[error(
        "data dir {0} exists and is not a directory; name a directory (a missing one is created)"
    )]
    NotADirectory(PathBuf),
    #[error("data dir {dir} belongs to node {found}, not node {wanted}; refusing to start")]
    WrongNode {
        dir: PathBuf,
        found: String,
        wanted: u64,
    },
}

/// An open, exclusively locked data directory. The lock is held until this is dropped (or
/// the process dies: `flock` locks die with their process, so a kill -9 never leaves a
/// stale lock behind).
pub struct DataDir {
    root: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Creates (if needed), locks, and checks ownership of `root` for `node_id`.
    pub fn open(root: &Path, node_id: u64) -> Result<DataDir, DataDirError> {
        let io = |step| {
            move |source| DataDirError::Io {
                dir: root.to_path_buf(),
                step,
                source,
            }
        };
        if fs::metadata(root).is_ok_and(|m| !m.is_dir()) {
            return Err(DataDirError::NotADirectory(root.to_path_buf()));
        }
        fs::create_dir_all(root).map_err(io("creating it"))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(LOCK_FILE))
            .map_err(io("opening its lock file"))?;
        // SAFETY: flock on a file descriptor we own; no memory is shared with the kernel.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(DataDirError::Locked(root.to_path_buf()));
        }
        check_owner(root, node_id).map_err(|e| match e {
            OwnerError::Io(source) => io("reading or writing its node_id file")(source),
            OwnerError::Wrong(found) => DataDirError::WrongNode {
                dir: root.to_path_buf(),
                found,
                wanted: node_id,
            },
        })?;
        Ok(DataDir {
            root: root.to_path_buf(),
            _lock: lock,
        })
    }

    /// The directory itself (small files of its own live here: the node id, the
    /// admission).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn db_path(&self) -> PathBuf {
        self.root.join("db")
    }

    pub fn snapshot_path(&self) -> PathBuf {
        self.root.join("snapshots")
    }
}

enum OwnerError {
    Io(std::io::Error),
    Wrong(String),
}

fn check_owner(root: &Path, node_id: u64) -> Result<(), OwnerError> {
    let path = root.join(NODE_ID_FILE);
    match fs::read_to_string(&path) {
        Ok(found) if found.trim() == node_id.to_string() => Ok(()),
        Ok(found) => Err(OwnerError::Wrong(found.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut f = File::create(&path).map_err(OwnerError::Io)?;
            writeln!(f, "{node_id}").map_err(OwnerError::Io)?;
            f.sync_all().map_err(OwnerError::Io)
        }
        Err(e) => Err(OwnerError::Io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_is_refused_while_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDir::open(dir.path(), 1).unwrap();
        assert!(matches!(
            DataDir::open(dir.path(), 1),
            Err(DataDirError::Locked(_))
        ));
        drop(first);
        DataDir::open(dir.path(), 1).unwrap();
    }

    #[test]
    fn a_file_is_refused_as_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        fs::write(&file, b"not a dir").unwrap();
        assert!(matches!(
            DataDir::open(&file, 1),
            Err(DataDirError::NotADirectory(path)) if path == file
        ));
        assert_eq!(
            fs::read(&file).unwrap(),
            b"not a dir",
            "the file was left as it was"
        );
    }

    #[test]
    fn another_node_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(DataDir::open(dir.path(), 1).unwrap());
        let err = DataDir::open(dir.path(), 2).err().unwrap();
        assert!(
            err.to_string().contains("belongs to node 1, not node 2"),
            "{err}"
        );
    }
}
