//! Starting child processes (cairn nodes, etcd members) that cannot outlive the harness.
//!
//! - Every child is forked by one long-lived thread with `PR_SET_PDEATHSIG = SIGKILL`: the
//!   kernel kills it if the harness dies, even by SIGKILL. The signal follows the *thread*
//!   that forked, hence a dedicated thread rather than whichever tokio worker asks.
//! - Every child runs in its own process group, so a terminal Ctrl-C reaches only the
//!   harness, which then stops its children itself.
//! - stdin is closed; stdout and stderr are appended to the child's log file.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};

use anyhow::{anyhow, Context, Result};

type SpawnJob = (Command, mpsc::Sender<std::io::Result<Child>>);

pub struct Spawner {
    jobs: Mutex<mpsc::Sender<SpawnJob>>,
}

impl Spawner {
    /// Starts the forking thread (named `thread_name`); it ends with the `Spawner`.
    pub fn new(thread_name: &str) -> Result<Spawner> {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .context("starting the spawner thread")?;
        Ok(Spawner {
            jobs: Mutex::new(tx),
        })
    }

    /// Starts `cmd` with its output appended to `log` (`what` names it in errors).
    pub fn spawn(&self, mut cmd: Command, log: File, what: &str) -> Result<Child> {
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        let gone = || anyhow!("spawner thread is gone");
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send((cmd, tx))
            .map_err(|_| gone())?;
        rx.recv()
            .map_err(|_| gone())?
            .with_context(|| format!("spawning {what}"))
    }
}
