//! cairn's key model as a [`Model`] for the linearizability search: one key's state,
//! version, generation and forget epoch, and what every operation may do to them
//! (SPEC §2's transition table, preconditions checked first, then the state rules).
//!
//! Results carry versions, so the model checks them too: an acknowledged mutation must
//! report exactly the version the sequential order gives it, which makes a lost or
//! doubly applied mutation visible even without a read in between.
//!
//! `based_on_revision` depends on cluster-wide revisions the model does not track; the
//! model accepts a `stale_write` rejection whenever the key has a fence at all (it was
//! forgotten, revoked or re-created at some point: a fence never lifts, SPEC §2), and the
//! forget checker checks the revisions precisely.

use cairn_api::State;

use crate::check::models::Model;

/// One key's observable state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyState {
    pub state: State,
    pub value: Option<i64>,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    /// Forgotten, revoked or re-created at some point, so a `based_on_revision` write can
    /// be fenced off. Not part of what a read shows (see [`KeyState::shows`]).
    pub fenced: bool,
}

impl KeyState {
    pub fn absent() -> Self {
        KeyState {
            state: State::Absent,
            value: None,
            version: 0,
            generation: 1,
            forget_epoch: 0,
            fenced: false,
        }
    }

    /// Whether a read that returned `seen` (whose `fenced` means nothing) agrees with this.
    fn shows(&self, seen: &KeyState) -> bool {
        KeyState {
            fenced: self.fenced,
            ..seen.clone()
        } == *self
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MOp {
    Write {
        value: i64,
        expected: Option<u64>,
        based: bool,
        clear: bool,
        override_revocation: bool,
    },
    Forget {
        expected: Option<u64>,
    },
    Revoke,
    Reinstate,
    Read,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MInput {
    pub key: String,
    pub op: MOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MOutput {
    /// An applied (or idempotent) mutation's result.
    Mutation {
        state: State,
        version: u64,
        generation: u64,
        forget_epoch: u64,
        already: bool,
    },
    /// `None`: 404, absent.
    Read(Option<KeyState>),
    /// A definite rejection with its code.
    Rejected(String),
}

/// The cairn key model; partitions by key.
#[derive(Clone, Copy, Debug, Default)]
pub struct CairnKey;

/// What a mutation does from `s`: the next state and whether it was a no-op
/// (`already`), or the code it is rejected with.
fn apply(s: &KeyState, op: &MOp) -> Result<(KeyState, bool), &'static str> {
    let expected = match op {
        MOp::Write { expected, .. } | MOp::Forget { expected } => *expected,
        _ => None,
    };
    if expected.is_some_and(|e| e != s.version) {
        return Err("version_conflict");
    }
    let mut next = s.clone();
    match op {
        MOp::Write {
            value,
            clear,
            override_revocation,
            ..
        } => {
            match s.state {
                State::Revoked if !override_revocation => return Err("key_revoked"),
                State::Forgotten if !clear => return Err("key_forgotten"),
                State::Forgotten => {
                    next.generation += 1;
                    next.fenced = true;
                }
                _ => {}
            }
            next.state = State::Active;
            next.value = Some(*value);
            next.version += 1;
        }
        MOp::Forget { .. } => {
            if s.state == State::Forgotten {
                return Ok((next, true));
            }
            next.state = State::Forgotten;
            next.value = None;
            next.version += 1;
            next.forget_epoch = next.version;
            next.fenced = true;
        }
        MOp::Revoke => match s.state {
            State::Absent => return Err("not_found"),
            State::Forgotten => return Err("key_forgotten"),
            State::Revoked => return Ok((next, true)),
            State::Active => {
                next.state = State::Revoked;
                next.version += 1;
                next.fenced = true;
            }
        },
        MOp::Reinstate => match s.state {
            State::Absent => return Err("not_found"),
            State::Forgotten => return Err("key_forgotten"),
            State::Active => return Ok((next, true)),
            State::Revoked => {
                next.state = State::Active;
                next.version += 1;
            }
        },
        MOp::Read => return Ok((next, true)),
    }
    Ok((next, false))
}

impl Model for CairnKey {
    type State = KeyState;
    type Input = MInput;
    type Output = MOutput;
    type Key = String;

    fn init(&self) -> KeyState {
        KeyState::absent()
    }

    fn step(&self, s: &KeyState, input: &MInput, output: Option<&MOutput>) -> Option<KeyState> {
        let based = matches!(input.op, MOp::Write { based: true, .. });
        match (&input.op, output) {
            (MOp::Read, Some(MOutput::Read(None))) => (s.state == State::Absent).then(|| s.clone()),
            (MOp::Read, Some(MOutput::Read(Some(seen)))) => s.shows(seen).then(|| s.clone()),
            (MOp::Read, None) => Some(s.clone()),
            (MOp::Read, Some(_)) | (_, Some(MOutput::Read(_))) => None,
            // Unknown outcome: it applies if it can; "rejected" is the search skipping it.
            (op, None) => Some(apply(s, op).map_or_else(|_| s.clone(), |(next, _)| next)),
            (
                op,
                Some(MOutput::Mutation {
                    state,
                    version,
                    generation,
                    forget_epoch,
                    already,
                }),
            ) => {
                let (next, was_noop) = apply(s, op).ok()?;
                let matches = next.state == *state
                    && next.version == *version
                    && next.generation == *generation
                    && next.forget_epoch == *forget_epoch
                    && was_noop == *already;
                matches.then_some(next)
            }
            (op, Some(MOutput::Rejected(code))) => {
                let expected_ok = match op {
                    MOp::Write { expected, .. } | MOp::Forget { expected } => {
                        expected.is_none_or(|e| e == s.version)
                    }
                    _ => true,
                };
                let explained = match code.as_str() {
                    "version_conflict" => !expected_ok,
                    "stale_write" => based && expected_ok && s.fenced,
                    other => apply(s, op).err() == Some(other),
                };
                explained.then(|| s.clone())
            }
        }
    }

    fn key(&self, input: &MInput) -> String {
        input.key.clone()
    }

    /// Reads, rejections and idempotent repeats leave the state as it is.
    fn is_read_only(&self, input: &MInput, output: Option<&MOutput>) -> bool {
        match (&input.op, output) {
            (MOp::Read, _) => true,
            (_, Some(MOutput::Rejected(_))) => true,
            (_, Some(MOutput::Mutation { already, .. })) => *already,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(value: i64) -> MOp {
        MOp::Write {
            value,
            expected: None,
            based: false,
            clear: false,
            override_revocation: false,
        }
    }

    fn step(s: &KeyState, op: MOp, out: Option<MOutput>) -> Option<KeyState> {
        CairnKey.step(
            s,
            &MInput {
                key: "k".into(),
                op,
            },
            out.as_ref(),
        )
    }

    fn mutation(s: &KeyState, already: bool) -> MOutput {
        MOutput::Mutation {
            state: s.state,
            version: s.version,
            generation: s.generation,
            forget_epoch: s.forget_epoch,
            already,
        }
    }

    #[test]
    fn write_forget_write_needs_clear_tombstone() {
        let s0 = KeyState::absent();
        let s1 = step(&s0, write(7), None).unwrap();
        assert_eq!((s1.version, s1.value), (1, Some(7)));
        let s2 = step(&s1, MOp::Forget { expected: None }, None).unwrap();
        assert_eq!(
            (s2.state, s2.version, s2.forget_epoch),
            (State::Forgotten, 2, 2)
        );
        // A plain write acknowledged on a forgotten key is impossible.
        let resurrected = KeyState {
            state: State::Active,
            value: Some(8),
            version: 3,
            generation: 1,
            forget_epoch: 2,
            fenced: true,
        };
        assert!(step(&s2, write(8), Some(mutation(&resurrected, false))).is_none());
        assert!(step(
            &s2,
            write(8),
            Some(MOutput::Rejected("key_forgotten".into()))
        )
        .is_some());
        let clear = MOp::Write {
            value: 8,
            expected: None,
            based: false,
            clear: true,
            override_revocation: false,
        };
        let s3 = step(&s2, clear, None).unwrap();
        assert_eq!((s3.generation, s3.version, s3.forget_epoch), (2, 3, 2));
    }

    #[test]
    fn versions_in_results_must_match() {
        let s0 = KeyState::absent();
        let mut doubled = step(&s0, write(1), None).unwrap();
        doubled.version = 2;
        assert!(step(&s0, write(1), Some(mutation(&doubled, false))).is_none());
    }

    #[test]
    fn idempotent_forget_and_rejections() {
        let s = step(&KeyState::absent(), MOp::Forget { expected: None }, None).unwrap();
        assert_eq!((s.version, s.forget_epoch), (1, 1));
        assert!(step(&s, MOp::Forget { expected: None }, Some(mutation(&s, true))).is_some());
        assert!(step(
            &s,
            MOp::Forget { expected: None },
            Some(mutation(&s, false))
        )
        .is_none());
        assert!(step(
            &s,
            MOp::Revoke,
            Some(MOutput::Rejected("key_forgotten".into()))
        )
        .is_some());
        assert!(step(
            &KeyState::absent(),
            MOp::Revoke,
            Some(MOutput::Rejected("not_found".into()))
        )
        .is_some());
        let cas = MOp::Write {
            value: 3,
            expected: Some(1),
            based: false,
            clear: false,
            override_revocation: false,
        };
        assert!(step(
            &s,
            cas.clone(),
            Some(MOutput::Rejected("version_conflict".into()))
        )
        .is_none());
        assert!(step(&s, cas, Some(MOutput::Rejected("key_forgotten".into()))).is_some());
    }

    #[test]
    fn a_fence_outlives_the_revoke_that_set_it() {
        let based = MOp::Write {
            value: 9,
            expected: None,
            based: true,
            clear: false,
            override_revocation: false,
        };
        let stale = || Some(MOutput::Rejected("stale_write".into()));
        let s1 = step(&KeyState::absent(), write(1), None).unwrap();
        assert!(
            step(&s1, based.clone(), stale()).is_none(),
            "nothing fences yet"
        );
        let s2 = step(&s1, MOp::Revoke, None).unwrap();
        let s3 = step(&s2, MOp::Reinstate, None).unwrap();
        assert_eq!(s3.state, State::Active);
        assert!(step(&s3, based.clone(), stale()).is_some(), "reinstated");
        // What a read shows does not include the fence, and still matches.
        let seen = KeyState {
            fenced: false,
            ..s3.clone()
        };
        assert!(step(&s3, MOp::Read, Some(MOutput::Read(Some(seen)))).is_some());
    }

    #[test]
    fn reads_must_match_the_whole_state() {
        let s = step(&KeyState::absent(), write(5), None).unwrap();
        assert!(step(&s, MOp::Read, Some(MOutput::Read(Some(s.clone())))).is_some());
        assert!(step(&s, MOp::Read, Some(MOutput::Read(None))).is_none());
        let mut old = s.clone();
        old.value = Some(4);
        assert!(step(&s, MOp::Read, Some(MOutput::Read(Some(old)))).is_none());
    }
}
