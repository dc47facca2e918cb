//! The operation model every checker works on: who invoked what, when, when (if ever) it
//! completed, and what came back.
//!
//! The model is generic over the operation (`I`, e.g. read / write / cas / get / put /
//! append) and its result (`O`); the concrete types live with their sequential spec in
//! [`super::models`], so cairn's own key model can plug in its own.
//!
//! Indeterminate operations (Jepsen's `:info`, a client timeout, a crash before the reply)
//! have no completion time: they may take effect at any point after their invocation, or
//! never. The checker treats that as a completion at +infinity that it is also allowed to
//! skip.

use std::collections::BTreeMap;
use std::fmt;

/// A point in time. Only the order matters: parsers use the event's position in the file,
/// live runs can use nanoseconds since the start of the test.
pub type Time = u64;

/// The client (Jepsen "process") that issued an operation. A process has at most one
/// operation in flight.
pub type ProcessId = u64;

/// One client operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    pub process: ProcessId,
    pub invoke: Time,
    /// `None`: indeterminate — it may take effect at any point after `invoke`, or never.
    pub complete: Option<Time>,
    pub input: I,
    /// `None`: the result was never observed (always so when `complete` is `None`). A
    /// completed operation with an unknown result must still take effect inside its window.
    pub output: Option<O>,
}

impl<I, O> Operation<I, O> {
    /// Whether the operation may have taken effect at any time after its invocation, or
    /// not at all.
    pub fn is_indeterminate(&self) -> bool {
        self.complete.is_none()
    }
}

impl<I: fmt::Debug, O: fmt::Debug> fmt::Display for Operation<I, O> {
    /// One line for counterexamples: `p3 Write(4) -> Write [t12..t15]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{} {:?} -> ", self.process, self.input)?;
        match &self.output {
            Some(out) => write!(f, "{out:?}")?,
            None => write!(f, "unknown")?,
        }
        match self.complete {
            Some(end) => write!(f, " [t{}..t{}]", self.invoke, end),
            None => write!(f, " [t{}..never/any time later]", self.invoke),
        }
    }
}

/// A whole recorded history, operations in invocation order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History<I, O> {
    pub ops: Vec<Operation<I, O>>,
}

impl<I, O> History<I, O> {
    pub fn new(mut ops: Vec<Operation<I, O>>) -> Self {
        // Invocation order makes operation numbers in counterexamples read chronologically.
        ops.sort_by_key(|op| op.invoke);
        History { ops }
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Why an event could not be paired with the right operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("process {0} invokes while its previous operation is still in flight")]
    AlreadyInFlight(ProcessId),
    #[error("process {0} completes an operation it never invoked")]
    NothingInFlight(ProcessId),
}

/// Pairs a stream of invoke / completion events into [`Operation`]s, the way Jepsen
/// histories are written: each invocation pairs with the next completion of the same
/// process. Time is the event's position in the stream.
#[derive(Debug)]
pub struct HistoryBuilder<I, O> {
    /// Keyed by process; a BTreeMap so `finish` is deterministic.
    in_flight: BTreeMap<ProcessId, (Time, I)>,
    ops: Vec<Operation<I, O>>,
    clock: Time,
}

impl<I, O> Default for HistoryBuilder<I, O> {
    fn default() -> Self {
        HistoryBuilder {
            in_flight: BTreeMap::new(),
            ops: Vec::new(),
            clock: 0,
        }
    }
}

impl<I, O> HistoryBuilder<I, O> {
    pub fn new() -> Self {
        Self::default()
    }

    fn tick(&mut self) -> Time {
        self.clock += 1;
        self.clock
    }

    /// `process` starts `input`.
    pub fn invoke(&mut self, process: ProcessId, input: I) -> Result<(), BuildError> {
        if self.in_flight.contains_key(&process) {
            return Err(BuildError::AlreadyInFlight(process));
        }
        let now = self.tick();
        self.in_flight.insert(process, (now, input));
        Ok(())
    }

    /// The operation `process` has in flight, so a parser can check that a completion
    /// matches its invocation before recording it.
    pub fn in_flight(&self, process: ProcessId) -> Option<&I> {
        self.in_flight.get(&process).map(|(_, input)| input)
    }

    fn take(&mut self, process: ProcessId) -> Result<(Time, I), BuildError> {
        self.in_flight
            .remove(&process)
            .ok_or(BuildError::NothingInFlight(process))
    }

    /// The operation of `process` completed now with `output`.
    pub fn complete(&mut self, process: ProcessId, output: O) -> Result<(), BuildError> {
        let (invoke, input) = self.take(process)?;
        let now = self.tick();
        self.ops.push(Operation {
            process,
            invoke,
            complete: Some(now),
            input,
            output: Some(output),
        });
        Ok(())
    }

    /// The operation of `process` has an unknown outcome (`:info`, timeout): it may take
    /// effect at any time after its invocation, or never.
    pub fn indeterminate(&mut self, process: ProcessId) -> Result<(), BuildError> {
        let (invoke, input) = self.take(process)?;
        self.tick();
        self.ops.push(Operation {
            process,
            invoke,
            complete: None,
            input,
            output: None,
        });
        Ok(())
    }

    /// The operation of `process` is dropped: it certainly did not take effect, or it could
    /// not constrain anything (a read whose result is unknown).
    pub fn discard(&mut self, process: ProcessId) -> Result<(), BuildError> {
        self.take(process)?;
        self.tick();
        Ok(())
    }

    /// The history so far. Operations still in flight never completed, so they are
    /// indeterminate; those for which `keep_unfinished` is false (reads: they constrain
    /// nothing without a result) are dropped.
    pub fn finish(mut self, keep_unfinished: impl Fn(&I) -> bool) -> History<I, O> {
        for (process, (invoke, input)) in std::mem::take(&mut self.in_flight) {
            if keep_unfinished(&input) {
                self.ops.push(Operation {
                    process,
                    invoke,
                    complete: None,
                    input,
                    output: None,
                });
            }
        }
        History::new(self.ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_each_invoke_with_the_next_completion_of_its_process() {
        let mut b: HistoryBuilder<&str, &str> = HistoryBuilder::new();
        b.invoke(1, "a").unwrap();
        b.invoke(2, "b").unwrap();
        b.complete(2, "B").unwrap();
        b.complete(1, "A").unwrap();
        let h = b.finish(|_| true);
        assert_eq!(h.len(), 2);
        assert_eq!(
            (h.ops[0].input, h.ops[0].invoke, h.ops[0].complete),
            ("a", 1, Some(4))
        );
        assert_eq!(
            (h.ops[1].input, h.ops[1].invoke, h.ops[1].complete),
            ("b", 2, Some(3))
        );
    }

    #[test]
    fn unfinished_operations_are_indeterminate_or_dropped() {
        let mut b: HistoryBuilder<&str, &str> = HistoryBuilder::new();
        b.invoke(1, "write").unwrap();
        b.invoke(2, "read").unwrap();
        b.invoke(3, "write").unwrap();
        b.indeterminate(3).unwrap();
        let h = b.finish(|input| *input != "read");
        assert_eq!(h.len(), 2);
        assert!(h
            .ops
            .iter()
            .all(|op| op.is_indeterminate() && op.output.is_none()));
    }

    #[test]
    fn rejects_unpaired_events() {
        let mut b: HistoryBuilder<(), ()> = HistoryBuilder::new();
        assert_eq!(b.complete(7, ()), Err(BuildError::NothingInFlight(7)));
        b.invoke(7, ()).unwrap();
        assert_eq!(b.invoke(7, ()), Err(BuildError::AlreadyInFlight(7)));
    }
}
