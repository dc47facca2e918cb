//! Known bugs, planted on purpose so the chaos suite can prove it catches them.
//!
//! Compiled in only with the `planted-bugs` cargo feature, and even then active only when
//! `CAIRN_PLANTED_BUG` names one of them. Normal builds compile every check below to
//! `false`, so the hooks cost nothing and cannot be switched on.

/// The bugs the checkers must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// `forget-no-tombstone-check`: a write to a forgotten key succeeds without
    /// `clear_tombstone` (resurrection).
    WriteThroughTombstone,
    /// `bounded-skips-token`: bounded reads are served without a fresh quorum token.
    BoundedSkipsToken,
    /// `ack-before-fsync`: log appends are acknowledged at once and written later.
    AckBeforeFsync,
    /// `dedup-applies-twice`: a retried `request_id` is applied again.
    DedupAppliesTwice,
    /// `stale-leader-read`: linearizable reads on a node that believes it leads skip the
    /// quorum check, so a deposed leader serves stale data.
    StaleLeaderRead,
}

impl Bug {
    pub const ALL: [Bug; 5] = [
        Bug::WriteThroughTombstone,
        Bug::BoundedSkipsToken,
        Bug::AckBeforeFsync,
        Bug::DedupAppliesTwice,
        Bug::StaleLeaderRead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::WriteThroughTombstone => "forget-no-tombstone-check",
            Bug::BoundedSkipsToken => "bounded-skips-token",
            Bug::AckBeforeFsync => "ack-before-fsync",
            Bug::DedupAppliesTwice => "dedup-applies-twice",
            Bug::StaleLeaderRead => "stale-leader-read",
        }
    }
}

/// Whether `bug` is planted in this process.
#[cfg(feature = "planted-bugs")]
pub fn active(bug: Bug) -> bool {
    use std::sync::OnceLock;
    static SELECTED: OnceLock<Option<Bug>> = OnceLock::new();
    let selected = SELECTED.get_or_init(|| {
        let name = std::env::var("CAIRN_PLANTED_BUG").ok()?;
        let bug = Bug::ALL.into_iter().find(|b| b.name() == name);
        match bug {
            Some(b) => tracing::warn!(
                bug = b.name(),
                "PLANTED BUG ACTIVE: this node is deliberately wrong"
            ),
            None => tracing::error!(%name, "unknown CAIRN_PLANTED_BUG; no bug planted"),
        }
        bug
    });
    *selected == Some(bug)
}

#[cfg(not(feature = "planted-bugs"))]
#[inline(always)]
pub fn active(_bug: Bug) -> bool {
    false
}
