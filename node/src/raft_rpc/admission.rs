//! Admission: whether this node may answer Raft at all.
//!
//! A data dir that holds no Raft state cannot tell a new node from a voter whose data was
//! lost (a replaced disk, a wipe by mistake) and that came back under its old id. Such a
//! node has forgotten its vote and every entry it acknowledged. If it answered as that
//! voter, it would grant its vote to any candidate (an empty log is behind every log), so
//! a lagging follower could win without entries the cluster had committed with the wiped
//! node's help; and a stale leader whose configuration still counts it would find a
//! quorum in it. A 600 s chaos campaign (seed 1205) found both: acknowledged writes
//! reappeared at old versions and forgotten values came back.
//!
//! So a node whose data dir holds no Raft state refuses every vote request, append and
//! snapshot until it is **admitted**, by the node that initializes the cluster (for the
//! first members) or by the leader that joins it (`POST /cluster/join`, which admits a
//! node only while it is not a voter: a new id, an id whose earlier node was removed, or
//! a learner left by an unfinished join; a learner's acknowledgements count toward no
//! quorum). The admission names the admitting leader's term:
//!
//! - from then on the node acts as if it had persisted a vote for that leader in that
//!   term: it grants votes only in later terms and takes entries only from that leader or
//!   from leaders of later terms, so a stale leader or candidate cannot count it;
//! - it is written to the data dir (fsync, then an atomic rename) before it is answered,
//!   so a restart keeps it;
//! - once given, it is never replaced: a node admitted once holds, or will hold, the
//!   cluster's log;
//! - a data dir that holds Raft state but no admission file was made before admissions
//!   existed, and is admitted as it opens.
//!
//! A voter whose data dir was wiped therefore stays refused, as harmless as a stopped
//! node, until an operator removes it and joins it again (docs/operations.md).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::consensus::{NodeId, Vote};

/// The admission file, in the data dir's root.
pub const ADMISSION_FILE: &str = "admission";

/// The leader and term a node was admitted by. Votes in that term or earlier, and entries
/// from any other leader of that term or earlier, are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Floor {
    pub term: u64,
    pub leader: NodeId,
}

/// What `POST /raft/admit` asks of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdmitRequest {
    /// Only whether it is admitted.
    Ask,
    /// Admit it from `Floor` on, unless it already is.
    Admit(Floor),
    /// As `Admit`, answered with the floor the node holds afterwards
    /// ([`AdmissionState::AdmittedBy`]): an init learns from it whether a first member was
    /// taken by another init (sent at the same time) or another cluster first. Added after
    /// the other variants, so a node that does not know it fails to decode it and the
    /// initializer takes that as no answer.
    Claim(Floor),
}

/// Whether a node may answer Raft, as `POST /raft/admit` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdmissionState {
    /// Its data dir holds no Raft state and no admission: it refuses Raft.
    NotAdmitted,
    Admitted,
    /// The floor an admitted node holds: the answer to [`AdmitRequest::Claim`] only.
    AdmittedBy(Floor),
}

/// This node's admission, shared by the peer routes (which check it on every vote,
/// append and snapshot: one atomic load, since an admission never changes once given) and
/// the cluster routes (which admit the nodes they add).
#[derive(Debug)]
pub struct Admission {
    path: PathBuf,
    floor: OnceLock<Floor>,
    /// Held while the admission file is written, so two admissions race to one file.
    writing: Mutex<()>,
}

impl Admission {
    /// The admission kept in `dir`. A data dir with Raft state but no admission file
    /// (`holds_raft_state`) is admitted now, from term 0.
    pub fn open(dir: &Path, holds_raft_state: bool) -> io::Result<Admission> {
        let admission = Admission {
            path: dir.join(ADMISSION_FILE),
            floor: OnceLock::new(),
            writing: Mutex::new(()),
        };
        match admission.read()? {
            Some(stored) => {
                let _ = admission.floor.set(stored);
            }
            None if holds_raft_state => {
                admission.admit(Floor { term: 0, leader: 0 })?;
            }
            None => {}
        }
        Ok(admission)
    }

    pub fn state(&self) -> AdmissionState {
        match self.floor.get() {
            Some(_) => AdmissionState::Admitted,
            None => AdmissionState::NotAdmitted,
        }
    }

    /// Admits this node from `floor` on, durably, unless it already is (then nothing
    /// changes). Answers the state after the call.
    pub fn admit(&self, floor: Floor) -> io::Result<AdmissionState> {
        // A panic while writing leaves no floor set, and the file old or whole (renamed
        // into place): the lock's poison carries nothing to repair.
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        if self.floor.get().is_none() {
            write_durably(&self.path, &encode(floor))?;
            let _ = self.floor.set(floor);
            tracing::info!(
                term = floor.term,
                leader = floor.leader,
                "admitted: this node now answers Raft"
            );
        }
        Ok(AdmissionState::Admitted)
    }

    /// Admits this node from `floor` on unless it already is, and answers the floor it
    /// holds afterwards: `floor` itself, or the one it was admitted by before.
    pub fn claim(&self, floor: Floor) -> io::Result<Floor> {
        self.admit(floor)?;
        Ok(*self.floor.get().expect("an admission was written or held"))
    }

    /// Refuses a vote request unless this node is admitted and the candidate's term is
    /// later than the admission's.
    pub fn check_candidate(&self, vote: &Vote) -> Result<(), String> {
        let floor = self.floor()?;
        if vote.leader_id.term > floor.term {
            return Ok(());
        }
        Err(format!(
            "vote request for term {} refused: this node was admitted in term {}",
            vote.leader_id.term, floor.term
        ))
    }

    /// Refuses an append or snapshot unless this node is admitted and the sender leads a
    /// later term than the admission's, or is the admitting leader itself.
    pub fn check_leader(&self, vote: &Vote) -> Result<(), String> {
        let floor = self.floor()?;
        let term = vote.leader_id.term;
        let sender = vote.leader_id.voted_for();
        if term > floor.term || (term == floor.term && sender == Some(floor.leader)) {
            return Ok(());
        }
        Err(format!(
            "entries from {sender:?} in term {term} refused: this node was admitted by node {} \
             in term {}",
            floor.leader, floor.term
        ))
    }

    fn floor(&self) -> Result<Floor, String> {
        self.floor.get().copied().ok_or_else(|| {
            "this node holds no Raft state and was not admitted by an init or a join: if it \
             was a member, its data dir was lost, and it stays refused until it is removed \
             and joined again"
                .to_string()
        })
    }

    fn read(&self) -> io::Result<Option<Floor>> {
        match fs::read_to_string(&self.path) {
            Ok(text) => decode(&text).map(Some).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not an admission (`TERM LEADER`): {text:?}",
                        self.path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn encode(floor: Floor) -> String {
    format!("{} {}\n", floor.term, floor.leader)
}

fn decode(text: &str) -> Option<Floor> {
    let mut words = text.split_ascii_whitespace();
    let term = words.next()?.parse().ok()?;
    let leader = words.next()?.parse().ok()?;
    words.next().is_none().then_some(Floor { term, leader })
}

/// Writes `text` to `path` so that a crash leaves either the old file or the new one:
/// a temporary file, fsync, rename over `path`, fsync of the directory.
fn write_durably(path: &Path, text: &str) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    fs::rename(&temporary, path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64, node: NodeId) -> Vote {
        Vote::new(term, node)
    }

    #[test]
    fn a_fresh_data_dir_refuses_everything() {
        let dir = tempfile::tempdir().unwrap();
        let admission = Admission::open(dir.path(), false).unwrap();
        assert_eq!(admission.state(), AdmissionState::NotAdmitted);
        let refused = admission.check_candidate(&vote(1_000, 2)).unwrap_err();
        assert!(refused.contains("not admitted"), "{refused}");
        assert!(admission.check_leader(&vote(1_000, 2)).is_err());
        assert!(!dir.path().join(ADMISSION_FILE).exists());
    }

    #[test]
    fn an_admission_is_a_floor_of_term_and_leader() {
        let dir = tempfile::tempdir().unwrap();
        let admission = Admission::open(dir.path(), false).unwrap();
        admission.admit(Floor { term: 7, leader: 1 }).unwrap();
        assert!(admission.check_candidate(&vote(7, 3)).is_err());
        assert!(admission.check_candidate(&vote(8, 3)).is_ok());
        assert!(admission.check_leader(&vote(7, 1)).is_ok());
        assert!(admission.check_leader(&vote(7, 3)).is_err());
        assert!(admission.check_leader(&vote(6, 1)).is_err());
        assert!(admission.check_leader(&vote(8, 3)).is_ok());
    }

    #[test]
    fn an_admission_survives_a_restart_and_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let first = Admission::open(dir.path(), false).unwrap();
        first.admit(Floor { term: 7, leader: 1 }).unwrap();
        drop(first);
        let reopened = Admission::open(dir.path(), false).unwrap();
        assert_eq!(reopened.state(), AdmissionState::Admitted);
        reopened.admit(Floor { term: 9, leader: 2 }).unwrap();
        assert!(
            reopened.check_leader(&vote(7, 1)).is_ok(),
            "the first floor holds"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join(ADMISSION_FILE)).unwrap(),
            "7 1\n"
        );
    }

    #[test]
    fn a_claim_answers_the_floor_the_node_holds() {
        let dir = tempfile::tempdir().unwrap();
        let admission = Admission::open(dir.path(), false).unwrap();
        let first = Floor { term: 0, leader: 1 };
        assert_eq!(admission.claim(first).unwrap(), first);
        assert_eq!(
            admission.claim(first).unwrap(),
            first,
            "a retry of the same claim"
        );
        let other = Floor { term: 0, leader: 2 };
        assert_eq!(
            admission.claim(other).unwrap(),
            first,
            "the first claim holds"
        );
    }

    #[test]
    fn a_data_dir_with_raft_state_from_before_admissions_is_admitted() {
        let dir = tempfile::tempdir().unwrap();
        let admission = Admission::open(dir.path(), true).unwrap();
        assert_eq!(admission.state(), AdmissionState::Admitted);
        assert!(admission.check_candidate(&vote(1, 2)).is_ok());
        assert!(admission.check_leader(&vote(1, 2)).is_ok());
    }

    #[test]
    fn a_damaged_admission_file_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(ADMISSION_FILE), "seven\n").unwrap();
        let err = Admission::open(dir.path(), true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("not an admission"), "{err}");
    }
}
