//! Sequential specifications: what each operation does to the state when applied alone, and
//! which results are legal. The linearizability search only ever talks to a [`Model`].
//!
//! - [`Register`]: one register with read / write / cas, initially absent (Jepsen's etcd
//!   test).
//! - [`KvMap`]: string keys with get / put / append, each key initially the empty string
//!   (porcupine's kv test).
//!
//! cairn's own key model plugs in by implementing [`Model`] for its operation types.

use std::fmt::Debug;
use std::hash::Hash;

/// A sequential specification the checker can search against.
///
/// The checker memoizes `(set of linearized operations, state)`, so `State` must be cheap to
/// clone, hash and compare; keep it to what results can observe.
pub trait Model {
    type State: Clone + Eq + Hash + Debug;
    /// `Eq + Hash`: identical indeterminate operations are interchangeable, and the search
    /// groups them to explore only one of each.
    type Input: Debug + Eq + Hash;
    type Output: Debug;
    /// Operations with different keys never interact, so each key's sub-history can be
    /// checked on its own (P-compositionality). Models with one shared state use `()`.
    type Key: Clone + Ord + Debug;

    fn init(&self) -> Self::State;

    /// Applies `input` to `state` if it could have produced `output`, returning the next
    /// state; `None` if the result is impossible from `state`. `output` is `None` when the
    /// result was never observed: any result is acceptable then, and the step describes the
    /// operation taking effect.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// The partition `input` belongs to.
    fn key(&self, input: &Self::Input) -> Self::Key;

    /// True if `input` with `output` never changes the state when it is legal (a read, a
    /// failed cas), i.e. `step(s, ..)` is `None` or `Some(s)` for every `s`. The search
    /// linearizes such operations as soon as they are legal instead of branching on them;
    /// answering `false` is always safe, only slower.
    fn is_read_only(&self, _input: &Self::Input, _output: Option<&Self::Output>) -> bool {
        false
    }
}

/// Register values in the Jepsen etcd test are small integers.
pub type Value = i64;

/// An operation on a [`Register`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOp {
    Read,
    Write(Value),
    /// Set to `new` if the register holds `expect`.
    Cas {
        expect: Value,
        new: Value,
    },
}

/// The result of a [`RegisterOp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterResult {
    /// `None`: the register was absent.
    Read(Option<Value>),
    Write,
    /// `swapped: false` is a completed cas that found another value, which constrains the
    /// state as much as a read does.
    Cas {
        swapped: bool,
    },
}

/// One register, initially absent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Register;

impl Model for Register {
    type State = Option<Value>;
    type Input = RegisterOp;
    type Output = RegisterResult;
    type Key = ();

    fn init(&self) -> Self::State {
        None
    }

    fn step(
        &self,
        state: &Self::State,
        input: &RegisterOp,
        output: Option<&RegisterResult>,
    ) -> Option<Self::State> {
        use RegisterOp as Op;
        use RegisterResult as Res;
        match (input, output) {
            (Op::Read, Some(Res::Read(seen))) => (seen == state).then_some(*state),
            (Op::Read, None) => Some(*state),
            (Op::Write(v), Some(Res::Write) | None) => Some(Some(*v)),
            (Op::Cas { expect, new }, Some(Res::Cas { swapped: true })) => {
                (*state == Some(*expect)).then_some(Some(*new))
            }
            (Op::Cas { expect, .. }, Some(Res::Cas { swapped: false })) => {
                (*state != Some(*expect)).then_some(*state)
            }
            // Unknown outcome: it swaps iff the value matches when it takes effect (the
            // "never took effect" case is the checker skipping it).
            (Op::Cas { expect, new }, None) => Some(if *state == Some(*expect) {
                Some(*new)
            } else {
                *state
            }),
            // A result of another kind of operation can never be explained.
            _ => None,
        }
    }

    fn key(&self, _input: &RegisterOp) {}

    fn is_read_only(&self, input: &RegisterOp, output: Option<&RegisterResult>) -> bool {
        matches!(
            (input, output),
            (RegisterOp::Read, _)
                | (
                    RegisterOp::Cas { .. },
                    Some(RegisterResult::Cas { swapped: false })
                )
        )
    }
}

/// An operation on a [`KvMap`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvOp {
    Get { key: String },
    Put { key: String, value: String },
    Append { key: String, value: String },
}

impl KvOp {
    pub fn key(&self) -> &str {
        match self {
            KvOp::Get { key } | KvOp::Put { key, .. } | KvOp::Append { key, .. } => key,
        }
    }
}

/// The result of a [`KvOp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvResult {
    Get(String),
    Put,
    Append,
}

/// String keys with get / put / append, each key initially the empty string.
///
/// The state is the value of one key: [`Model::key`] splits histories by key, so a partition
/// never sees two keys.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvMap;

impl Model for KvMap {
    type State = String;
    type Input = KvOp;
    type Output = KvResult;
    type Key = String;

    fn init(&self) -> String {
        String::new()
    }

    fn step(&self, state: &String, input: &KvOp, output: Option<&KvResult>) -> Option<String> {
        match (input, output) {
            (KvOp::Get { .. }, Some(KvResult::Get(seen))) => (seen == state).then(|| state.clone()),
            (KvOp::Get { .. }, None) => Some(state.clone()),
            (KvOp::Put { value, .. }, Some(KvResult::Put) | None) => Some(value.clone()),
            (KvOp::Append { value, .. }, Some(KvResult::Append) | None) => {
                Some(format!("{state}{value}"))
            }
            _ => None,
        }
    }

    fn key(&self, input: &KvOp) -> String {
        input.key().to_string()
    }

    fn is_read_only(&self, input: &KvOp, _output: Option<&KvResult>) -> bool {
        matches!(input, KvOp::Get { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_reads_see_the_state_and_absent_is_distinct_from_every_value() {
        let r = Register;
        assert_eq!(
            r.step(&None, &RegisterOp::Read, Some(&RegisterResult::Read(None))),
            Some(None)
        );
        assert_eq!(
            r.step(
                &None,
                &RegisterOp::Read,
                Some(&RegisterResult::Read(Some(0)))
            ),
            None
        );
        assert_eq!(
            r.step(
                &Some(0),
                &RegisterOp::Read,
                Some(&RegisterResult::Read(None))
            ),
            None
        );
    }

    #[test]
    fn register_cas_outcomes_constrain_the_state() {
        let r = Register;
        let cas = RegisterOp::Cas { expect: 1, new: 2 };
        let ok = RegisterResult::Cas { swapped: true };
        let failed = RegisterResult::Cas { swapped: false };
        assert_eq!(r.step(&Some(1), &cas, Some(&ok)), Some(Some(2)));
        assert_eq!(r.step(&Some(3), &cas, Some(&ok)), None);
        assert_eq!(r.step(&Some(3), &cas, Some(&failed)), Some(Some(3)));
        assert_eq!(r.step(&Some(1), &cas, Some(&failed)), None);
        assert_eq!(r.step(&None, &cas, Some(&failed)), Some(None));
        assert_eq!(r.step(&Some(1), &cas, None), Some(Some(2)));
        assert_eq!(r.step(&Some(3), &cas, None), Some(Some(3)));
    }

    #[test]
    fn register_rejects_a_result_of_another_kind() {
        assert_eq!(
            Register.step(
                &None,
                &RegisterOp::Write(1),
                Some(&RegisterResult::Read(None))
            ),
            None
        );
    }

    #[test]
    fn kv_appends_concatenate_and_gets_must_match() {
        let m = KvMap;
        let append = KvOp::Append {
            key: "k".into(),
            value: "x 1 y".into(),
        };
        let s = m.step(&m.init(), &append, Some(&KvResult::Append)).unwrap();
        let s = m.step(&s, &append, None).unwrap();
        assert_eq!(s, "x 1 yx 1 y");
        let get = KvOp::Get { key: "k".into() };
        assert!(m.step(&s, &get, Some(&KvResult::Get(s.clone()))).is_some());
        assert!(m
            .step(&s, &get, Some(&KvResult::Get(String::new())))
            .is_none());
        assert_eq!(m.key(&get), "k");
    }

    /// The search trusts `is_read_only`: such an operation must never change any state.
    #[test]
    fn read_only_operations_never_change_the_state() {
        let values = [None, Some(0), Some(1)];
        let inputs = [
            RegisterOp::Read,
            RegisterOp::Write(1),
            RegisterOp::Cas { expect: 0, new: 1 },
            RegisterOp::Cas { expect: 1, new: 1 },
        ];
        let outputs = [
            None,
            Some(RegisterResult::Read(None)),
            Some(RegisterResult::Read(Some(1))),
            Some(RegisterResult::Write),
            Some(RegisterResult::Cas { swapped: true }),
            Some(RegisterResult::Cas { swapped: false }),
        ];
        for input in &inputs {
            for output in &outputs {
                if !Register.is_read_only(input, output.as_ref()) {
                    continue;
                }
                for state in &values {
                    let next = Register.step(state, input, output.as_ref());
                    assert!(
                        next.is_none() || next == Some(*state),
                        "{input:?} {output:?}"
                    );
                }
            }
        }
        let get = KvOp::Get { key: "k".into() };
        for state in ["", "x"] {
            for output in [None, Some(KvResult::Get("x".into()))] {
                assert!(KvMap.is_read_only(&get, output.as_ref()));
                let next = KvMap.step(&state.to_string(), &get, output.as_ref());
                assert!(next.is_none() || next.as_deref() == Some(state));
            }
        }
    }
}
