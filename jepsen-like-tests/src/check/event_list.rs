//! The time-ordered list of call and return events the linearizability search walks.
//!
//! A doubly linked list in a `Vec` (indices, not pointers), node 0 a sentinel head.
//! Lifting an operation unlinks its call and its return but leaves their own links intact,
//! so undoing lifts in LIFO order relinks them in O(1) ("dancing links").

use super::history::Operation;

pub(super) const NIL: u32 = u32::MAX;
const HEAD: u32 = 0;

/// A node: the call or the return of operation `op` (partition-local index).
#[derive(Clone, Copy, Debug)]
pub(super) struct Event {
    pub op: u32,
    pub is_call: bool,
    pub next: u32,
    prev: u32,
    /// For a call, its return event (lifted together).
    ret: u32,
}

pub(super) struct EventList {
    nodes: Vec<Event>,
}

impl EventList {
    pub fn new<I, O>(ops: &[&Operation<I, O>]) -> Self {
        // Sort key (never?, time, return?, op): returns of indeterminate operations go last,
        // at +infinity; on equal times calls come first, so operations that touch count as
        // concurrent (the lenient reading of a shared timestamp).
        let mut order: Vec<(bool, u64, bool, u32)> = Vec::with_capacity(2 * ops.len());
        for (i, op) in ops.iter().enumerate() {
            let i = i as u32;
            order.push((false, op.invoke, false, i));
            let end = completion(op);
            order.push((end.is_none(), end.unwrap_or(0), true, i));
        }
        order.sort_unstable();
        let sentinel = Event {
            op: NIL,
            is_call: false,
            next: NIL,
            prev: NIL,
            ret: NIL,
        };
        let mut nodes = Vec::with_capacity(order.len() + 1);
        nodes.push(sentinel);
        let mut call_of = vec![NIL; ops.len()];
        for (pos, &(_, _, is_return, op)) in order.iter().enumerate() {
            let me = pos as u32 + 1;
            nodes[me as usize - 1].next = me;
            nodes.push(Event {
                op,
                is_call: !is_return,
                next: NIL,
                prev: me - 1,
                ret: NIL,
            });
            if is_return {
                nodes[call_of[op as usize] as usize].ret = me;
            } else {
                call_of[op as usize] = me;
            }
        }
        EventList { nodes }
    }

    /// The earliest event still in the list (`NIL` if empty).
    pub fn first(&self) -> u32 {
        self.nodes[HEAD as usize].next
    }

    pub fn get(&self, node: u32) -> Event {
        self.nodes[node as usize]
    }

    fn unlink(&mut self, node: u32) {
        let Event { prev, next, .. } = self.get(node);
        self.nodes[prev as usize].next = next;
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn relink(&mut self, node: u32) {
        let Event { prev, next, .. } = self.get(node);
        self.nodes[prev as usize].next = node;
        if next != NIL {
            self.nodes[next as usize].prev = node;
        }
    }

    /// Removes the operation called at `call` (both its events).
    pub fn lift(&mut self, call: u32) {
        let ret = self.get(call).ret;
        self.unlink(call);
        self.unlink(ret);
    }

    /// Undoes the most recent `lift(call)` not yet undone.
    pub fn unlift(&mut self, call: u32) {
        let ret = self.get(call).ret;
        self.relink(ret);
        self.relink(call);
    }
}

/// When an operation completed, `None` for never. A completion before the invocation is a
/// recording glitch; clamping it keeps the call before its return.
pub(super) fn completion<I, O>(op: &Operation<I, O>) -> Option<u64> {
    op.complete.map(|c| c.max(op.invoke))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(invoke: u64, complete: Option<u64>) -> Operation<(), ()> {
        Operation {
            process: 0,
            invoke,
            complete,
            input: (),
            output: Some(()),
        }
    }

    fn walk(list: &EventList) -> Vec<(u32, bool)> {
        let mut seen = vec![];
        let mut n = list.first();
        while n != NIL {
            let e = list.get(n);
            seen.push((e.op, e.is_call));
            n = e.next;
        }
        seen
    }

    #[test]
    fn orders_events_calls_first_on_ties_and_never_last() {
        let (a, b, c) = (op(1, Some(4)), op(4, Some(5)), op(2, None));
        let list = EventList::new(&[&a, &b, &c]);
        assert_eq!(
            walk(&list),
            vec![
                (0, true),
                (2, true),
                (1, true),
                (0, false),
                (1, false),
                (2, false)
            ]
        );
    }

    #[test]
    fn lifts_and_restores() {
        let (a, b) = (op(1, Some(4)), op(2, Some(3)));
        let mut list = EventList::new(&[&a, &b]);
        let full = walk(&list);
        assert_eq!(full, vec![(0, true), (1, true), (1, false), (0, false)]);
        let second_call = list.get(list.first()).next;
        list.lift(second_call);
        assert_eq!(walk(&list), vec![(0, true), (0, false)]);
        let first_call = list.first();
        list.lift(first_call);
        assert!(walk(&list).is_empty());
        list.unlift(first_call);
        list.unlift(second_call);
        assert_eq!(walk(&list), full);
    }
}
