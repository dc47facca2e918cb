//! `--session-file`: the session token is read before a command and written after it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cairn_client::{Client, Session};

use crate::{io_error, Result};

/// The session in `path`; a missing or empty file is a new session.
///
/// - A missing file in a directory that does not exist is refused here, before anything
///   is sent: its save would fail after the command had taken effect.
pub fn load(path: &Path) -> Result<Session> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(Session::new()),
        Ok(text) => Session::import_token(&text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            match dir {
                Some(dir) if !dir.is_dir() => Err(io_error(
                    path.display(),
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "directory {} does not exist; nothing was sent",
                            dir.display()
                        ),
                    ),
                )),
                _ => Ok(Session::new()),
            }
        }
        Err(err) => Err(io_error(path.display(), err)),
    }
}

/// Writes the token next to the file and renames it over, so a crash never leaves half a
/// token behind.
pub fn save(path: &Path, client: &Client) -> Result<()> {
    let Some(session) = client.session() else {
        return Ok(());
    };
    let mut temporary = OsString::from(path.as_os_str());
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, session.export_token() + "\n")
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| io_error(path.display(), e))
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
}
