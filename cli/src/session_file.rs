//! `--session-file`: the session token is read before a command and written after it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cairn_client::{Client, Session};

use crate::{io_error, Result};

/// The session in `path`; a missing or empty file is a new session.
///
/// A file that [`save`] could not write is refused here, before anything is sent: its
/// save would otherwise fail after the command had taken effect.
pub fn load(path: &Path) -> Result<Session> {
    let session = read(path)?;
    check_saveable(path).map_err(|err| {
        io_error(
            path.display(),
            std::io::Error::new(
                err.kind(),
                format!("cannot be saved ({err}); nothing was sent"),
            ),
        )
    })?;
    Ok(session)
}

fn read(path: &Path) -> Result<Session> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(Session::new()),
        Ok(text) => Session::import_token(&text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Session::new()),
        Err(err) => Err(io_error(path.display(), err)),
    }
}

/// Does what [`save`] will do, short of changing the file: creates and removes a file
/// next to it (the directory exists and takes new files; the name is this process's, so
/// a concurrent save's temporary file is left alone), and opens an existing file for
/// writing without truncating it (an immutable or append-only file refuses the rename
/// over it as it refuses this).
fn check_saveable(path: &Path) -> std::io::Result<()> {
    let mut probe = temporary_path(path).into_os_string();
    probe.push(format!(".{}", std::process::id()));
    std::fs::File::create(&probe)?;
    std::fs::remove_file(&probe)?;
    match std::fs::OpenOptions::new().write(true).open(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        opened => opened.map(drop),
    }
}

/// Writes the token next to the file and renames it over, so a crash never leaves half a
/// token behind.
pub fn save(path: &Path, client: &Client) -> Result<()> {
    let Some(session) = client.session() else {
        return Ok(());
    };
    let temporary = temporary_path(path);
    std::fs::write(&temporary, session.export_token() + "\n")
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| io_error(path.display(), e))
}

/// Where [`save`] writes the token before renaming it over `path`.
fn temporary_path(path: &Path) -> PathBuf {
    let mut temporary = OsString::from(path.as_os_str());
    temporary.push(".tmp");
    PathBuf::from(temporary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session");
        assert_eq!(load(&path).unwrap(), Session::new(), "missing file");
        let nowhere = dir.path().join("absent-dir").join("session");
        let refused = load(&nowhere).unwrap_err();
        assert_eq!(refused.exit_code(), 1);
        assert!(
            refused.to_string().contains("nothing was sent"),
            "{refused}"
        );
        std::fs::write(&path, "garbage!").unwrap();
        assert_eq!(load(&path).unwrap_err().exit_code(), 2);
        let mut session = Session::new();
        session.observe_key(
            "k",
            cairn_client::KeyMark {
                generation: 1,
                forget_epoch: 1,
                version: 2,
                revision: 9,
            },
        );
        let client = Client::new(vec!["127.0.0.1:1".into()])
            .unwrap()
            .with_session(session.clone());
        save(&path, &client).unwrap();
        assert_eq!(load(&path).unwrap(), session);
    }

    #[test]
    fn a_file_that_could_not_be_saved_is_refused_before_anything_is_sent() {
        // A directory that exists but takes no new file: the save would fail.
        let refused = load(Path::new("/proc/self/cairn.session")).unwrap_err();
        assert_eq!(refused.exit_code(), 1);
        assert!(
            refused.to_string().contains("nothing was sent"),
            "{refused}"
        );
        // The check leaves nothing behind next to a file it accepts.
        let dir = tempfile::tempdir().unwrap();
        load(&dir.path().join("session")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
