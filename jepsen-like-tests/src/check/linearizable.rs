//! The linearizability search: is there a total order of the operations, consistent with
//! real time, in which the sequential [`Model`] explains every observed result?
//!
//! Algorithm: Wing & Gong's search with Lowe's just-in-time linearization and memoization,
//! as in Porcupine and Knossos' `linear` checker:
//!
//! - The history becomes one list of call and return events sorted by time (calls first on
//!   ties, so touching operations count as concurrent). An operation may be linearized next
//!   only if its call comes before the first return still in the list; linearizing it
//!   "lifts" both its events out of the list.
//! - Reaching a return event means the operation it ends was not linearized in time: undo
//!   the most recent choice (an explicit stack, not recursion) and try the next candidate.
//! - Every `(set of linearized operations, model state)` reached is cached; reaching one
//!   again cannot lead anywhere new, which turns the exponential search into one bounded by
//!   the number of distinct configurations. A configuration that failed also rules out the
//!   same one with more indeterminate operations applied (see `memo`).
//! - Indeterminate operations complete at +infinity and need not be linearized at all: the
//!   search succeeds once every *completed* operation is linearized.
//! - Read-only operations ([`Model::is_read_only`]: reads, failed cas) are linearized as
//!   soon as they are legal, without exploring "later": if an order linearizes such an `r`
//!   later, moving `r` up to now keeps every result (it changes no state) and every
//!   real-time constraint (whatever must precede `r` returned before `r` was invoked, so it
//!   is already linearized). This removes most branching in read-heavy histories.
//! - Indeterminate operations are pruned two ways. One whose step would leave the state
//!   unchanged is not linearized there: dropping it from any order that uses it keeps that
//!   order valid. And identical indeterminate operations (same input, both pending) are
//!   interchangeable, so they are only linearized in invocation order: [`Model::Input`] is
//!   `Eq + Hash` for this.
//! - P-compositionality: operations with different [`Model::key`]s never interact, so each
//!   key is checked on its own, and the keys are spread over the machine's cores.
//!
//! Every partition runs under a [`Budget`]; running out gives [`Verdict::Unknown`], which
//! callers must treat as a failure (nothing was proven).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::event_list::{completion, EventList, NIL};
use super::history::{History, Operation};
use super::memo::{Cache, Linearized, Seen};
use super::models::Model;

/// How much search one partition may spend before the verdict is [`Verdict::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Search steps (one candidate tried or one backtrack each).
    pub max_steps: u64,
    pub max_time: Duration,
    /// Approximate bytes of memoized configurations.
    pub max_memory: usize,
}

impl Default for Budget {
    /// Generous: every peer history needs well under a million steps.
    fn default() -> Self {
        Budget {
            max_steps: 200_000_000,
            max_time: Duration::from_secs(60),
            max_memory: 2 << 30,
        }
    }
}

/// The part of a [`Budget`] that ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Steps,
    Time,
    Memory,
}

/// The checker's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable(Counterexample),
    /// The budget ran out first: nothing was proven either way. Callers must treat this as
    /// a failure.
    Unknown(Exhausted),
}

impl Verdict {
    /// True only for a proof of linearizability; `Unknown` is not one.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => write!(f, "linearizable"),
            Verdict::NotLinearizable(c) => {
                write!(
                    f,
                    "not linearizable: partition {}: {}",
                    c.partition, c.description
                )
            }
            Verdict::Unknown(e) => write!(
                f,
                "unknown: partition {} ran out of its {:?} budget after {} steps in {:.1?}",
                e.partition, e.limit, e.steps, e.elapsed
            ),
        }
    }
}

/// Where the search got stuck: the partition and the operations around the deepest point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The partition key, `Debug`-formatted.
    pub partition: String,
    /// Human-readable, multi-line; operation numbers are indices into the history.
    pub description: String,
}

/// A partition whose search ran out of budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    pub partition: String,
    pub limit: Limit,
    pub steps: u64,
    pub elapsed: Duration,
}

/// Checks `history` against `model`, one partition (key) at a time, on every core: the
/// partitions share nothing, and a chaos run's check is the harness's longest step.
///
/// A definite counterexample in any partition wins over another partition's `Unknown`: it
/// proves the history is not linearizable whatever the rest would have said. Once one is
/// found no further partition is started. Among several, the one of the smallest key is
/// reported, as a search in key order would; which ones were searched may vary with
/// scheduling, the verdict does not. A search that runs past [`PROGRESS_EVERY`] says how
/// far it got on stderr at that interval.
pub fn check<M>(model: &M, history: &History<M::Input, M::Output>, budget: Budget) -> Verdict
where
    M: Model + Sync,
    M::Input: Sync,
    M::Output: Sync,
    M::Key: Sync,
{
    let parts: Vec<Keyed<'_, M>> = partition(model, history).into_iter().collect();
    let results = search_all(model, &parts, budget);
    let mut unknown = None;
    for ((key, _), result) in parts.iter().zip(results) {
        match result {
            None | Some(PartResult::Linearizable) => {}
            Some(PartResult::NotLinearizable(description)) => {
                return Verdict::NotLinearizable(Counterexample {
                    partition: format!("{key:?}"),
                    description,
                })
            }
            Some(PartResult::Exhausted {
                limit,
                steps,
                elapsed,
            }) => {
                unknown.get_or_insert(Exhausted {
                    partition: format!("{key:?}"),
                    limit,
                    steps,
                    elapsed,
                });
            }
        }
    }
    unknown.map_or(Verdict::Linearizable, Verdict::Unknown)
}

/// A partition and its key.
type Keyed<'h, M> = (
    <M as Model>::Key,
    Part<'h, <M as Model>::Input, <M as Model>::Output>,
);

/// How often a long search reports its progress.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// One partition's outcome, without the model state (so it can leave its thread).
enum PartResult {
    Linearizable,
    NotLinearizable(String),
    Exhausted {
        limit: Limit,
        steps: u64,
        elapsed: Duration,
    },
}

/// Searches every partition, each on whichever worker takes it next (one worker per core,
/// this thread one of them); `None` for a partition not started because another was found
/// not linearizable.
fn search_all<M>(model: &M, parts: &[Keyed<'_, M>], budget: Budget) -> Vec<Option<PartResult>>
where
    M: Model + Sync,
    M::Input: Sync,
    M::Output: Sync,
    M::Key: Sync,
{
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, parts.len().max(1));
    let shared = Shared {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        violated: AtomicBool::new(false),
        results: parts.iter().map(|_| Mutex::new(None)).collect(),
        progress: Mutex::new(Progress {
            started: Instant::now(),
            reported: Instant::now(),
        }),
    };
    let work = || shared.work(model, parts, budget);
    std::thread::scope(|scope| {
        for _ in 1..workers {
            scope.spawn(work);
        }
        work();
    });
    shared
        .results
        .into_iter()
        .map(|r| r.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect()
}

/// What the workers of [`search_all`] share.
struct Shared {
    /// The next partition to take.
    next: AtomicUsize,
    done: AtomicUsize,
    /// A partition was found not linearizable: take no more.
    violated: AtomicBool,
    results: Vec<Mutex<Option<PartResult>>>,
    progress: Mutex<Progress>,
}

struct Progress {
    started: Instant,
    reported: Instant,
}

impl Shared {
    fn work<M: Model>(&self, model: &M, parts: &[Keyed<'_, M>], budget: Budget) {
        while !self.violated.load(Ordering::Relaxed) {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some((_, part)) = parts.get(i) else { break };
            let result = search_part(model, part, budget);
            if matches!(result, PartResult::NotLinearizable(_)) {
                self.violated.store(true, Ordering::Relaxed);
            }
            *self.results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
            self.report(done, parts.len());
        }
    }

    /// Prints how many partitions are done, at most every [`PROGRESS_EVERY`].
    fn report(&self, done: usize, total: usize) {
        let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        if progress.reported.elapsed() >= PROGRESS_EVERY && done < total {
            progress.reported = Instant::now();
            eprintln!(
                "linearizability search: {done} of {total} keys done after {:.0?}",
                progress.started.elapsed()
            );
        }
    }
}

fn search_part<M: Model>(
    model: &M,
    part: &Part<'_, M::Input, M::Output>,
    budget: Budget,
) -> PartResult {
    match Search::new(model, part).run(budget) {
        Outcome::Linearizable => PartResult::Linearizable,
        Outcome::NotLinearizable(stuck) => {
            PartResult::NotLinearizable(describe(part, stuck.as_ref()))
        }
        Outcome::Exhausted {
            limit,
            steps,
            elapsed,
        } => PartResult::Exhausted {
            limit,
            steps,
            elapsed,
        },
    }
}

/// One partition's operations, with their indices in the whole history (for reports).
struct Part<'a, I, O> {
    ids: Vec<usize>,
    ops: Vec<&'a Operation<I, O>>,
}

/// Splits the history by key; a BTreeMap so partitions are checked in a stable order.
fn partition<'a, M: Model>(
    model: &M,
    history: &'a History<M::Input, M::Output>,
) -> BTreeMap<M::Key, Part<'a, M::Input, M::Output>> {
    let mut parts = BTreeMap::new();
    for (id, op) in history.ops.iter().enumerate() {
        let part = parts.entry(model.key(&op.input)).or_insert_with(|| Part {
            ids: Vec::new(),
            ops: Vec::new(),
        });
        part.ids.push(id);
        part.ops.push(op);
    }
    parts
}

/// The deepest point where the search got stuck, for the counterexample.
struct Stuck<S> {
    /// Operations linearized at that point, in order (partition-local indices).
    order: Vec<u32>,
    state: S,
    /// The operation whose return was reached before it could be linearized.
    blocked: u32,
    /// Operations that could have gone next (calls before that return).
    pending: Vec<u32>,
}

enum Outcome<S> {
    Linearizable,
    NotLinearizable(Option<Stuck<S>>),
    Exhausted {
        limit: Limit,
        steps: u64,
        elapsed: Duration,
    },
}

/// What the search does after one step.
enum Next {
    /// Look at this event.
    Visit(Cursor),
    /// The current configuration cannot lead to a full linearization.
    Backtrack,
}

/// Where the scan for the next operation to linearize is.
///
/// Each configuration's candidates (calls before the first return) are scanned twice:
/// completed operations first, then indeterminate ones. Same branches, better order:
/// applying a timed-out write "just in case" is rarely what explains the results, so it is
/// tried only after everything else.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    node: u32,
    /// In the second pass (indeterminate candidates).
    deferred: bool,
}

/// A linearized operation on the search stack.
struct Choice<S> {
    call: u32,
    /// The state before it.
    before: S,
    /// Linearized eagerly (read-only): there is no alternative to explore for it.
    eager: bool,
    /// The pass it was chosen in, to resume the scan there.
    deferred: bool,
    /// The configuration it led to, marked failed when undone.
    entry: u32,
}

/// The search over one partition.
struct Search<'p, 'h, M: Model> {
    model: &'p M,
    ops: &'p [&'h Operation<M::Input, M::Output>],
    /// Per operation: [`Model::is_read_only`].
    read_only: Vec<bool>,
    /// Per indeterminate operation: the previous indeterminate one with the same input.
    twin: Vec<u32>,
    list: EventList,
    linearized: Linearized,
    cache: Cache<M::State>,
    stack: Vec<Choice<M::State>>,
    state: M::State,
    /// Completed operations not yet linearized; zero means success.
    remaining: usize,
    /// Indeterminate operations not linearized: without any, the second pass is skipped.
    optional: usize,
    deepest: Option<Stuck<M::State>>,
}

impl<'p, 'h, M: Model> Search<'p, 'h, M> {
    fn new(model: &'p M, part: &'p Part<'h, M::Input, M::Output>) -> Self {
        let ops = part.ops.as_slice();
        let ends: Vec<Option<u64>> = ops.iter().map(|op| completion(op)).collect();
        Search {
            model,
            ops,
            read_only: ops
                .iter()
                .map(|op| model.is_read_only(&op.input, op.output.as_ref()))
                .collect(),
            twin: twins(ops),
            list: EventList::new(ops),
            linearized: Linearized::new(&ends),
            cache: Cache::new(),
            stack: Vec::with_capacity(ops.len()),
            state: model.init(),
            remaining: ends.iter().filter(|end| end.is_some()).count(),
            optional: ends.iter().filter(|end| end.is_none()).count(),
            deepest: None,
        }
    }

    fn run(mut self, budget: Budget) -> Outcome<M::State> {
        let started = Instant::now();
        let mut at = self.restart();
        for steps in 0..budget.max_steps {
            if self.remaining == 0 {
                return Outcome::Linearizable;
            }
            // Reading the clock every step would dominate the cost of a step.
            if steps % 4096 == 0 {
                if let Some(limit) = self.over(&budget, started) {
                    return Outcome::Exhausted {
                        limit,
                        steps,
                        elapsed: started.elapsed(),
                    };
                }
            }
            at = match self.visit(at) {
                Next::Visit(next) => next,
                Next::Backtrack => match self.backtrack() {
                    Some(next) => next,
                    None => return Outcome::NotLinearizable(self.deepest.take()),
                },
            };
        }
        if self.remaining == 0 {
            return Outcome::Linearizable;
        }
        Outcome::Exhausted {
            limit: Limit::Steps,
            steps: budget.max_steps,
            elapsed: started.elapsed(),
        }
    }

    fn over(&self, budget: &Budget, started: Instant) -> Option<Limit> {
        if started.elapsed() > budget.max_time {
            Some(Limit::Time)
        } else if self.cache.approx_bytes() > budget.max_memory {
            Some(Limit::Memory)
        } else {
            None
        }
    }

    /// The start of the scan of a new configuration.
    fn restart(&self) -> Cursor {
        Cursor {
            node: self.list.first(),
            deferred: false,
        }
    }

    /// One scan step: try the candidate at `at`, skip it, or act on reaching a return.
    fn visit(&mut self, at: Cursor) -> Next {
        // NIL cannot happen while a completed operation remains (its return is in the
        // list); treat it as a dead end rather than index out of bounds.
        if at.node == NIL {
            return Next::Backtrack;
        }
        let event = self.list.get(at.node);
        let skip = Next::Visit(Cursor {
            node: event.next,
            ..at
        });
        if event.is_call {
            let indeterminate = self.ops[event.op as usize].is_indeterminate();
            return if indeterminate == at.deferred {
                self.try_call(at)
            } else {
                skip
            };
        }
        if !at.deferred && self.optional > 0 {
            return Next::Visit(Cursor {
                node: self.list.first(),
                deferred: true,
            });
        }
        self.note_stuck(at.node);
        Next::Backtrack
    }

    /// Tries to linearize the operation called at `at` now.
    fn try_call(&mut self, at: Cursor) -> Next {
        let event = self.list.get(at.node);
        let skip = Next::Visit(Cursor {
            node: event.next,
            ..at
        });
        let op = self.ops[event.op as usize];
        let eager = self.read_only[event.op as usize];
        if op.is_indeterminate() && self.twin_pending(event.op) {
            return skip;
        }
        let Some(next) = self.model.step(&self.state, &op.input, op.output.as_ref()) else {
            return skip;
        };
        if op.is_indeterminate() && next == self.state {
            return skip;
        }
        self.linearized.insert(event.op);
        let Seen::New(entry) = self.cache.insert(&self.linearized, &next) else {
            self.linearized.remove(event.op);
            // A read-only operation that may go now dominates every order that delays it:
            // if linearizing it now is known to fail, so does this configuration.
            return if eager { Next::Backtrack } else { skip };
        };
        let before = std::mem::replace(&mut self.state, next);
        let deferred = at.deferred;
        self.stack.push(Choice {
            call: at.node,
            before,
            eager,
            deferred,
            entry,
        });
        self.list.lift(at.node);
        self.count(event.op, -1);
        Next::Visit(self.restart())
    }

    /// Keeps `remaining` / `optional` in step with linearizing (-1) or undoing (+1) `op`.
    fn count(&mut self, op: u32, delta: isize) {
        let counter = if self.ops[op as usize].is_indeterminate() {
            &mut self.optional
        } else {
            &mut self.remaining
        };
        *counter = counter.wrapping_add_signed(delta);
    }

    /// Linearizing an indeterminate operation while an identical one invoked earlier is
    /// still pending mirrors linearizing that one, which is explored first.
    fn twin_pending(&self, op: u32) -> bool {
        let twin = self.twin[op as usize];
        twin != NIL && !self.linearized.contains(twin)
    }

    /// Undoes choices up to and including the most recent one that has an alternative, and
    /// returns where to continue: the event after that choice's call, in its pass. `None`
    /// when no choice is left: the partition is not linearizable.
    fn backtrack(&mut self) -> Option<Cursor> {
        // Bounded by the stack's length.
        while let Some(Choice {
            call,
            before,
            eager,
            deferred,
            entry,
        }) = self.stack.pop()
        {
            // Everything after this choice was explored: its configuration fails.
            self.cache.failed(entry);
            let op = self.list.get(call).op;
            self.state = before;
            self.linearized.remove(op);
            self.list.unlift(call);
            self.count(op, 1);
            if !eager {
                return Some(Cursor {
                    node: self.list.get(call).next,
                    deferred,
                });
            }
        }
        None
    }

    /// Remembers the deepest dead end: with the most operations linearized, it is the
    /// closest the history came to being explained.
    fn note_stuck(&mut self, ret: u32) {
        if self
            .deepest
            .as_ref()
            .is_some_and(|d| d.order.len() >= self.stack.len())
        {
            return;
        }
        let order = self
            .stack
            .iter()
            .map(|choice| self.list.get(choice.call).op)
            .collect();
        let mut pending = Vec::new();
        let mut node = self.list.first();
        // Bounded: the list is finite and `ret` is in it.
        while node != ret && node != NIL {
            let event = self.list.get(node);
            if event.is_call {
                pending.push(event.op);
            }
            node = event.next;
        }
        // Completed operations first: they are the ones the results are about.
        pending.sort_by_key(|&op| (self.ops[op as usize].is_indeterminate(), op));
        self.deepest = Some(Stuck {
            order,
            state: self.state.clone(),
            blocked: self.list.get(ret).op,
            pending,
        });
    }
}

/// For each indeterminate operation, the closest one invoked before it (ties: lower index,
/// as in the event list) with an identical input; `NIL` otherwise.
fn twins<I: Eq + std::hash::Hash, O>(ops: &[&Operation<I, O>]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..ops.len() as u32)
        .filter(|&i| ops[i as usize].is_indeterminate())
        .collect();
    order.sort_by_key(|&i| (ops[i as usize].invoke, i));
    let mut last: HashMap<&I, u32> = HashMap::new();
    let mut twin = vec![NIL; ops.len()];
    for i in order {
        if let Some(prev) = last.insert(&ops[i as usize].input, i) {
            twin[i as usize] = prev;
        }
    }
    twin
}

/// How many operations a counterexample shows on each side of the dead end.
const SHOWN: usize = 6;

fn describe<I: fmt::Debug, O: fmt::Debug, S: fmt::Debug>(
    part: &Part<'_, I, O>,
    stuck: Option<&Stuck<S>>,
) -> String {
    let Some(stuck) = stuck else {
        return "no operation can be linearized first".to_string();
    };
    let show = |op: u32| format!("#{} {}", part.ids[op as usize], part.ops[op as usize]);
    let completed = part.ops.iter().filter(|op| !op.is_indeterminate()).count();
    let indeterminate = part.ops.len() - completed;
    let mut out = format!(
        "no order explains all results. The deepest attempt linearized {} operation(s) (the \
         partition has {completed} completed and {indeterminate} indeterminate), reaching \
         state {:?}; then {} returned before it could take effect.",
        stuck.order.len(),
        stuck.state,
        show(stuck.blocked)
    );
    out.push_str("\n  last linearized, oldest first:");
    let skip = stuck.order.len().saturating_sub(SHOWN);
    for &op in &stuck.order[skip..] {
        out.push_str(&format!("\n    {}", show(op)));
    }
    out.push_str("\n  could have gone next, none of them leading to a full order:");
    for &op in stuck.pending.iter().take(SHOWN) {
        out.push_str(&format!("\n    {}", show(op)));
    }
    if stuck.pending.len() > SHOWN {
        out.push_str(&format!(
            "\n    ... and {} more",
            stuck.pending.len() - SHOWN
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::models::{KvMap, KvOp, KvResult, Register, RegisterOp, RegisterResult};
    use rand::{Rng, SeedableRng};

    type RegOp = Operation<RegisterOp, RegisterResult>;

    fn op(
        process: u64,
        invoke: u64,
        complete: Option<u64>,
        input: RegisterOp,
        output: Option<RegisterResult>,
    ) -> RegOp {
        Operation {
            process,
            invoke,
            complete,
            input,
            output,
        }
    }

    fn write(p: u64, t: (u64, u64), v: i64) -> RegOp {
        op(
            p,
            t.0,
            Some(t.1),
            RegisterOp::Write(v),
            Some(RegisterResult::Write),
        )
    }

    fn read(p: u64, t: (u64, u64), seen: Option<i64>) -> RegOp {
        op(
            p,
            t.0,
            Some(t.1),
            RegisterOp::Read,
            Some(RegisterResult::Read(seen)),
        )
    }

    fn lost_write(p: u64, invoke: u64, v: i64) -> RegOp {
        op(p, invoke, None, RegisterOp::Write(v), None)
    }

    fn cas(p: u64, t: (u64, u64), expect: i64, new: i64, swapped: bool) -> RegOp {
        op(
            p,
            t.0,
            Some(t.1),
            RegisterOp::Cas { expect, new },
            Some(RegisterResult::Cas { swapped }),
        )
    }

    fn verdict(ops: Vec<RegOp>) -> Verdict {
        check(&Register, &History::new(ops), Budget::default())
    }

    #[test]
    fn empty_history_is_linearizable() {
        assert_eq!(verdict(vec![]), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_acknowledged_write_is_not_linearizable() {
        let v = verdict(vec![write(0, (1, 2), 1), read(1, (3, 4), None)]);
        let Verdict::NotLinearizable(c) = &v else {
            panic!("{v}")
        };
        assert!(c.description.contains("#1"), "{}", c.description);
    }

    #[test]
    fn read_concurrent_with_a_write_may_see_either_value() {
        assert!(verdict(vec![write(0, (1, 4), 1), read(1, (2, 3), Some(1))]).is_linearizable());
        assert!(verdict(vec![write(0, (1, 4), 1), read(1, (2, 3), None)]).is_linearizable());
    }

    #[test]
    fn reads_cannot_go_back_in_time() {
        let ops = vec![
            write(0, (1, 10), 1),
            read(1, (2, 3), Some(1)),
            read(2, (4, 5), None),
        ];
        assert!(matches!(verdict(ops), Verdict::NotLinearizable(_)));
    }

    #[test]
    fn indeterminate_write_may_show_up_later_or_never() {
        let shows_up = vec![
            lost_write(0, 1, 1),
            read(1, (5, 6), None),
            read(1, (7, 8), Some(1)),
        ];
        assert!(verdict(shows_up).is_linearizable());
        let never = vec![lost_write(0, 1, 1), read(1, (5, 6), None)];
        assert!(verdict(never).is_linearizable());
    }

    #[test]
    fn indeterminate_write_cannot_take_effect_before_its_invocation_or_twice() {
        let too_early = vec![read(1, (1, 2), Some(1)), lost_write(0, 3, 1)];
        assert!(matches!(verdict(too_early), Verdict::NotLinearizable(_)));
        let flapping = vec![
            write(0, (1, 2), 0),
            lost_write(1, 3, 1),
            read(2, (4, 5), Some(1)),
            write(0, (6, 7), 0),
            read(2, (8, 9), Some(1)),
        ];
        assert!(matches!(verdict(flapping), Verdict::NotLinearizable(_)));
    }

    #[test]
    fn failed_cas_constrains_and_indeterminate_cas_may_swap() {
        let failed_on_match = vec![write(0, (1, 2), 3), cas(1, (3, 4), 3, 0, false)];
        assert!(matches!(
            verdict(failed_on_match),
            Verdict::NotLinearizable(_)
        ));
        let unknown_swap = vec![
            write(0, (1, 2), 3),
            op(1, 3, None, RegisterOp::Cas { expect: 3, new: 0 }, None),
            read(0, (5, 6), Some(0)),
        ];
        assert!(verdict(unknown_swap).is_linearizable());
    }

    #[test]
    fn kv_partitions_are_checked_independently_and_named() {
        let kv = |p, t: (u64, u64), input: KvOp, output: KvResult| Operation {
            process: p,
            invoke: t.0,
            complete: Some(t.1),
            input,
            output: Some(output),
        };
        let append = |k: &str, v: &str| KvOp::Append {
            key: k.into(),
            value: v.into(),
        };
        let get = |k: &str| KvOp::Get { key: k.into() };
        let h = History::new(vec![
            kv(0, (1, 2), append("a", "x"), KvResult::Append),
            kv(1, (3, 4), get("a"), KvResult::Get("x".into())),
            kv(0, (5, 6), append("b", "y"), KvResult::Append),
            kv(1, (7, 8), get("b"), KvResult::Get("yy".into())),
        ]);
        let v = check(&KvMap, &h, Budget::default());
        let Verdict::NotLinearizable(c) = &v else {
            panic!("{v}")
        };
        assert_eq!(c.partition, "\"b\"");
    }

    #[test]
    fn exhausted_budget_is_unknown_and_not_a_pass() {
        // Many concurrent writes and a read nobody wrote: the search must explore them all.
        let mut ops: Vec<RegOp> = (0..12).map(|p| write(p, (1, 100), p as i64)).collect();
        ops.push(read(99, (101, 102), Some(1000)));
        let budget = Budget {
            max_steps: 50,
            ..Budget::default()
        };
        let v = check(&Register, &History::new(ops), budget);
        assert!(matches!(v, Verdict::Unknown(_)), "{v}");
        assert!(!v.is_linearizable());
    }

    /// Linearizability straight from the definition, for cross-checking: try every order
    /// in which each operation goes after everything that completed before it was invoked.
    fn brute_force<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>]) -> bool {
        fn go<M: Model>(
            model: &M,
            ops: &[Operation<M::Input, M::Output>],
            done: &mut [bool],
            state: &M::State,
        ) -> bool {
            let finished = ops
                .iter()
                .zip(done.iter())
                .all(|(op, &d)| d || op.is_indeterminate());
            if finished {
                return true;
            }
            for i in 0..ops.len() {
                let blocked = (0..ops.len())
                    .any(|j| !done[j] && ops[j].complete.is_some_and(|c| c < ops[i].invoke));
                if done[i] || blocked {
                    continue;
                }
                if let Some(next) = model.step(state, &ops[i].input, ops[i].output.as_ref()) {
                    done[i] = true;
                    if go(model, ops, done, &next) {
                        return true;
                    }
                    done[i] = false;
                }
            }
            false
        }
        go(model, ops, &mut vec![false; ops.len()], &model.init())
    }

    fn random_window(rng: &mut impl Rng) -> (u64, Option<u64>) {
        let invoke = rng.gen_range(0..10);
        let complete = (!rng.gen_bool(0.2)).then(|| invoke + rng.gen_range(0..6));
        (invoke, complete)
    }

    fn random_register_op(rng: &mut impl Rng, process: u64) -> RegOp {
        let (invoke, complete) = random_window(rng);
        let value = |rng: &mut dyn rand::RngCore| rng.gen_range(0..3);
        let (input, output) = match rng.gen_range(0..3) {
            0 => {
                let seen = rng.gen_bool(0.8).then(|| value(rng));
                (RegisterOp::Read, RegisterResult::Read(seen))
            }
            1 => (RegisterOp::Write(value(rng)), RegisterResult::Write),
            _ => {
                let cas = RegisterOp::Cas {
                    expect: value(rng),
                    new: value(rng),
                };
                (
                    cas,
                    RegisterResult::Cas {
                        swapped: rng.gen_bool(0.5),
                    },
                )
            }
        };
        let output = complete.map(|_| output);
        op(process, invoke, complete, input, output)
    }

    #[test]
    fn agrees_with_brute_force_on_random_register_histories() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x11ea);
        let mut seen = [0; 2];
        for round in 0..20_000 {
            let n = rng.gen_range(1..=7);
            let ops: Vec<RegOp> = (0..n).map(|p| random_register_op(&mut rng, p)).collect();
            let expected = brute_force(&Register, &ops);
            let got = verdict(ops.clone());
            assert!(!matches!(got, Verdict::Unknown(_)));
            assert_eq!(got.is_linearizable(), expected, "round {round}: {ops:#?}");
            seen[usize::from(expected)] += 1;
        }
        // Both verdicts must be well represented for the comparison to mean anything.
        assert!(seen.iter().all(|&count| count > 2_000), "{seen:?}");
    }

    /// All keys in one state, to check P-compositionality against an unpartitioned search.
    struct WholeMap;

    impl Model for WholeMap {
        type State = BTreeMap<String, String>;
        type Input = KvOp;
        type Output = KvResult;
        type Key = ();

        fn init(&self) -> Self::State {
            BTreeMap::new()
        }

        fn step(
            &self,
            state: &Self::State,
            input: &KvOp,
            output: Option<&KvResult>,
        ) -> Option<Self::State> {
            let current = state.get(input.key()).cloned().unwrap_or_default();
            let next = KvMap.step(&current, input, output)?;
            let mut state = state.clone();
            state.insert(input.key().to_string(), next);
            Some(state)
        }

        fn key(&self, _input: &KvOp) {}
    }

    #[test]
    fn agrees_with_brute_force_on_random_kv_histories() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xc0de);
        let mut seen = [0; 2];
        for round in 0..10_000 {
            let n = rng.gen_range(1..=7);
            let ops: Vec<Operation<KvOp, KvResult>> = (0..n)
                .map(|p| {
                    let (invoke, complete) = random_window(&mut rng);
                    let key = ["a", "b"][rng.gen_range(0..2)].to_string();
                    let value = ["x", "y"][rng.gen_range(0..2)].to_string();
                    let (input, output) = match rng.gen_range(0..3) {
                        0 => {
                            let seen = ["", "x", "y", "xy", "yx"][rng.gen_range(0..5)];
                            (KvOp::Get { key }, KvResult::Get(seen.to_string()))
                        }
                        1 => (KvOp::Put { key, value }, KvResult::Put),
                        _ => (KvOp::Append { key, value }, KvResult::Append),
                    };
                    let output = complete.map(|_| output);
                    Operation {
                        process: p,
                        invoke,
                        complete,
                        input,
                        output,
                    }
                })
                .collect();
            let expected = brute_force(&WholeMap, &ops);
            let got = check(&KvMap, &History::new(ops.clone()), Budget::default());
            assert_eq!(got.is_linearizable(), expected, "round {round}: {ops:#?}");
            seen[usize::from(expected)] += 1;
        }
        assert!(seen.iter().all(|&count| count > 1_000), "{seen:?}");
    }

    /// A history of a real register: each operation takes effect at a random instant inside
    /// its window, so the history is linearizable by construction. A share `timeouts` of the
    /// writes and cas time out (indeterminate), half of those without taking effect.
    fn simulated(seed: u64, n: usize, clients: u64, timeouts: f64) -> Vec<RegOp> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut free_at = vec![0; clients as usize];
        // (effect time, process, invoke, complete, input)
        let mut planned = Vec::with_capacity(n);
        for _ in 0..n {
            let p = rng.gen_range(0..clients);
            let invoke = free_at[p as usize] + rng.gen_range(0..5);
            let effect = invoke + rng.gen_range(0..20);
            let complete = effect + rng.gen_range(0..20);
            free_at[p as usize] = complete + 1;
            let input = match rng.gen_range(0..3) {
                0 => RegisterOp::Read,
                1 => RegisterOp::Write(rng.gen_range(0..5)),
                _ => RegisterOp::Cas {
                    expect: rng.gen_range(0..5),
                    new: rng.gen_range(0..5),
                },
            };
            planned.push((effect, p, invoke, complete, input));
        }
        planned.sort_by_key(|&(effect, p, ..)| (effect, p));
        let mut state = None;
        let mut ops = Vec::with_capacity(n);
        for (_, p, invoke, complete, input) in planned {
            let timed_out = input != RegisterOp::Read && rng.gen_bool(timeouts);
            let applies = !timed_out || rng.gen_bool(0.5);
            let output = match input {
                RegisterOp::Read => RegisterResult::Read(state),
                RegisterOp::Write(v) => {
                    state = if applies { Some(v) } else { state };
                    RegisterResult::Write
                }
                RegisterOp::Cas { expect, new } => {
                    let swapped = state == Some(expect);
                    state = if swapped && applies { Some(new) } else { state };
                    RegisterResult::Cas { swapped }
                }
            };
            ops.push(match timed_out {
                true => op(p, invoke, None, input, None),
                false => op(p, invoke, Some(complete), input, Some(output)),
            });
        }
        ops
    }

    #[test]
    fn long_simulated_histories_are_linearizable() {
        for (seed, n, clients, timeouts) in
            [(1, 5_000, 5, 0.0), (2, 5_000, 10, 0.02), (3, 3_000, 5, 0.1)]
        {
            let v = verdict(simulated(seed, n, clients, timeouts));
            assert!(v.is_linearizable(), "seed {seed}: {v}");
        }
    }

    #[test]
    fn a_planted_impossible_read_in_a_long_history_is_found() {
        let history = History::new(simulated(4, 1_000, 5, 0.02));
        let mut ops = history.ops;
        let planted = (700..ops.len())
            .find(|&i| ops[i].input == RegisterOp::Read)
            .unwrap();
        ops[planted].output = Some(RegisterResult::Read(Some(99)));
        let v = verdict(ops);
        let Verdict::NotLinearizable(c) = &v else {
            panic!("{v}")
        };
        assert!(
            c.description.contains(&format!("then #{planted} ")),
            "{}",
            c.description
        );
    }
}
