//! Group commit for the Raft log.
//!
//! openraft 0.9 calls `append` once per proposed entry, and its core does not run the next
//! command until `append` returns. A synced write inside `append` would therefore cap the
//! leader at one entry per fsync and keep the core idle during each. Here `append` only
//! *stages*: the entries go into an in-memory tail, readable at once (openraft's contract),
//! and onto a queue. One writer thread takes everything queued, writes it to the segment
//! files and syncs once — one fdatasync for every append that queued while the previous
//! one ran (truncations and purges sync themselves) — and then reports each job durable,
//! in queue order.
//!
//! Invariants:
//! - Jobs reach the disk in queue order: one queue, one thread, and each group's jobs run
//!   in order (a truncate followed by new appends leaves exactly the new entries). So the
//!   log never has a hole.
//! - A job's `done` runs only after the sync that covers it has returned.
//! - Every staged entry is readable: readers take the tail before reading the disk, and an
//!   entry leaves the tail only after it is on disk. The tail is always a suffix of the log.
//! - Bounded: at most `QUEUE_JOBS_MAX` jobs wait (a full queue blocks the caller: the disk
//!   sets the pace), and one group holds at most `GROUP_JOBS_MAX` jobs.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::engine::StoreError;
use super::log::LogEngine;

const QUEUE_JOBS_MAX: usize = 4_096;
const GROUP_JOBS_MAX: usize = 1_024;

/// Called once a job is durable, or with the error that stopped it (the node's log is then
/// unusable and openraft shuts the core down).
pub type Done = Box<dyn FnOnce(Result<(), Arc<StoreError>>) + Send>;

/// Staged entries not yet known to be on disk: index → (job sequence number, bytes).
type Tail = BTreeMap<u64, (u64, Bytes)>;

/// The sequence number of entries staged by [`LogWriter::append_volatile`]: no job has it,
/// so they never leave the tail for the disk.
const VOLATILE: u64 = u64::MAX;

enum Op {
    Append(Vec<(u64, Bytes)>),
    Truncate { from: u64 },
    Purge { through: u64, marker: Vec<u8> },
}

struct Job {
    seq: u64,
    op: Op,
    done: Done,
}

struct Staging {
    tail: Tail,
    next_seq: u64,
}

pub struct LogWriter {
    engine: LogEngine,
    staging: Arc<Mutex<Staging>>,
    /// `None` only while dropping.
    queue: Option<SyncSender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LogWriter {
    /// Closes the queue and waits for the thread to finish what was queued and release
    /// its handle on the database: RocksDB must be closed by the time the process exits
    /// (a DB still open while static destructors run aborts with "pthread lock: Invalid
    /// argument").
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl LogWriter {
    /// Starts the writer thread; dropping the `LogWriter` stops it and waits for it.
    pub fn start(engine: LogEngine) -> Result<LogWriter, StoreError> {
        let staging = Arc::new(Mutex::new(Staging {
            tail: Tail::new(),
            next_seq: 0,
        }));
        let (queue, jobs) = sync_channel(QUEUE_JOBS_MAX);
        let (thread_engine, thread_staging) = (engine.clone(), staging.clone());
        let thread = std::thread::Builder::new()
            .name("cairn-log-writer".into())
            .spawn(move || write_groups(&thread_engine, &thread_staging, jobs))?;
        Ok(LogWriter {
            engine,
            staging,
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Stages `entries` (readable when this returns) and queues their synced write.
    pub fn append(&self, entries: Vec<(u64, Vec<u8>)>, done: Done) -> Result<(), StoreError> {
        // `Bytes` takes each encoding's allocation as it is: no copy of a large entry.
        let entries: Vec<(u64, Bytes)> = entries.into_iter().map(|(i, b)| (i, b.into())).collect();
        let mut staging = lock(&self.staging);
        let seq = staging.next_seq;
        staging.next_seq += 1;
        for (index, bytes) in &entries {
            staging.tail.insert(*index, (seq, bytes.clone()));
        }
        // Sent under the lock: queue order is staging order.
        self.send(seq, Op::Append(entries), done)
    }

    /// Stages `entries` and never writes them: lost when the process dies, and held in the
    /// tail for the life of the process (the planted scenarios run for seconds). Exists
    /// solely for the planted bug `ack-before-fsync`, whose appends are acknowledged at once.
    pub fn append_volatile(&self, entries: Vec<(u64, Vec<u8>)>) {
        let mut staging = lock(&self.staging);
        for (index, bytes) in entries {
            staging.tail.insert(index, (VOLATILE, bytes.into()));
        }
    }

    /// Drops staged entries >= `from` at once and queues the deletion of the stored ones.
    pub fn truncate(&self, from: u64, done: Done) -> Result<(), StoreError> {
        let mut staging = lock(&self.staging);
        staging.tail.split_off(&from);
        let seq = staging.next_seq;
        staging.next_seq += 1;
        self.send(seq, Op::Truncate { from }, done)
    }

    /// Queues the deletion of entries <= `through` with the `last_purged` marker.
    pub fn purge(&self, through: u64, marker: Vec<u8>, done: Done) -> Result<(), StoreError> {
        let mut staging = lock(&self.staging);
        let seq = staging.next_seq;
        staging.next_seq += 1;
        self.send(seq, Op::Purge { through, marker }, done)
    }

    fn send(&self, seq: u64, op: Op, done: Done) -> Result<(), StoreError> {
        let stopped = || StoreError::Invariant("the log writer thread has stopped".into());
        self.queue
            .as_ref()
            .ok_or_else(stopped)?
            .send(Job { seq, op, done })
            .map_err(|_| stopped())
    }

    /// Entries with `start <= index < end`, staged or stored, in order.
    ///
    /// The tail is a suffix of the log (appends are consecutive, and whole jobs leave it in
    /// queue order), so the disk is read only below its first entry.
    pub fn range(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.range_within(start, end, u64::MAX)
    }

    /// [`Self::range`] cut to the longest run from `start` of at most `max_bytes` (the
    /// entries' encoded bytes), but never less than one entry.
    pub fn range_within(
        &self,
        start: u64,
        end: u64,
        max_bytes: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        // The tail first: an entry that leaves it meanwhile is on disk before it leaves.
        let staged: Vec<(u64, Bytes)> = lock(&self.staging)
            .tail
            .range(start..end)
            .map(|(i, (_, b))| (*i, b.clone()))
            .collect();
        let stored_end = staged.first().map_or(end, |(i, _)| *i);
        let mut entries = self.engine.range_within(start, stored_end, max_bytes)?;
        if entries.last().is_some_and(|(i, _)| i + 1 < stored_end) {
            // Cut short on disk: a staged entry after it would leave a gap.
            return Ok(entries);
        }
        let mut taken: u64 = entries.iter().map(|(_, b)| b.len() as u64).sum();
        for (index, bytes) in staged {
            let size = bytes.len() as u64;
            if !entries.is_empty() && taken + size > max_bytes {
                break;
            }
            taken += size;
            entries.push((index, bytes.to_vec()));
        }
        Ok(entries)
    }

    /// The entry with the highest index, staged or stored.
    ///
    /// A staged entry is always above every stored one: openraft waits for a truncation to
    /// finish before it appends after it.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let staged = lock(&self.staging)
            .tail
            .last_key_value()
            .map(|(i, (_, b))| (*i, b.to_vec()));
        match staged {
            Some(entry) => Ok(Some(entry)),
            None => self.engine.last(),
        }
    }
}

fn lock(staging: &Mutex<Staging>) -> MutexGuard<'_, Staging> {
    // A panic while holding the lock leaves plain data behind; keep serving it.
    staging.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer thread: one synced write per group of queued jobs.
fn write_groups(engine: &LogEngine, staging: &Mutex<Staging>, jobs: Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < GROUP_JOBS_MAX {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let result = write_group(engine, &group).map_err(Arc::new);
        if result.is_ok() {
            forget_durable(&mut lock(staging).tail, &group);
        }
        for job in group {
            (job.done)(result.clone());
        }
    }
}

fn write_group(engine: &LogEngine, group: &[Job]) -> Result<(), StoreError> {
    for job in group {
        match &job.op {
            Op::Append(entries) => {
                let entries: Vec<(u64, &[u8])> =
                    entries.iter().map(|(i, b)| (*i, &b[..])).collect();
                engine.append(&entries)?
            }
            Op::Truncate { from } => engine.truncate(*from)?,
            Op::Purge { through, marker } => engine.purge(*through, marker)?,
        }
    }
    engine.sync()
}

/// Removes the group's appended entries from the tail, unless a later job staged another
/// entry under the same index (after a truncation) that is not written yet.
fn forget_durable(tail: &mut Tail, group: &[Job]) {
    for job in group {
        if let Op::Append(entries) = &job.op {
            for (index, _) in entries {
                if tail.get(index).is_some_and(|(seq, _)| *seq == job.seq) {
                    tail.remove(index);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::store::{Engine, EngineOptions};

    const WAIT: Duration = Duration::from_secs(10);

    fn open() -> (tempfile::TempDir, LogEngine, LogWriter) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(&dir.path().join("db"), &EngineOptions::default()).unwrap();
        let log = LogEngine::open(engine).unwrap();
        let writer = LogWriter::start(log.clone()).unwrap();
        (dir, log, writer)
    }

    /// A `Done` that reports on a channel, and the channel.
    fn signal() -> (Done, mpsc::Receiver<Result<(), Arc<StoreError>>>) {
        let (tx, rx) = mpsc::channel();
        let done: Done = Box::new(move |r| {
            let _ = tx.send(r);
        });
        (done, rx)
    }

    fn entries(indexes: std::ops::RangeInclusive<u64>, tag: &str) -> Vec<(u64, Vec<u8>)> {
        indexes
            .map(|i| (i, format!("{tag}{i}").into_bytes()))
            .collect()
    }

    fn tags(found: &[(u64, Vec<u8>)]) -> Vec<String> {
        found
            .iter()
            .map(|(_, b)| String::from_utf8(b.clone()).unwrap())
            .collect()
    }

    #[test]
    fn appended_entries_are_readable_at_once_and_on_disk_when_done_runs() {
        let (_dir, log, writer) = open();
        let (done, durable) = signal();
        writer.append(entries(1..=3, "a"), done).unwrap();
        assert_eq!(tags(&writer.range(1, 4).unwrap()), ["a1", "a2", "a3"]);
        assert_eq!(writer.last().unwrap().map(|(i, _)| i), Some(3));
        durable.recv_timeout(WAIT).unwrap().unwrap();
        assert_eq!(
            tags(&log.range(1, 4).unwrap()),
            ["a1", "a2", "a3"],
            "on disk"
        );
        assert!(
            lock(&writer.staging).tail.is_empty(),
            "durable entries leave the tail"
        );
    }

    #[test]
    fn a_budgeted_read_takes_whole_entries_staged_or_stored_and_at_least_one() {
        let (_dir, _log, writer) = open();
        let sized = |indexes: std::ops::RangeInclusive<u64>| -> Vec<(u64, Vec<u8>)> {
            indexes.map(|i| (i, vec![i as u8; 100])).collect()
        };
        let read = |start: u64, max_bytes: u64| -> Vec<u64> {
            let got = writer.range_within(start, 100, max_bytes).unwrap();
            got.iter().map(|(i, _)| *i).collect()
        };
        let (done, durable) = signal();
        writer.append(sized(1..=4), done).unwrap();
        durable.recv_timeout(WAIT).unwrap().unwrap();
        // Stored records carry a header of some bytes, so 250 holds two of 100, not three.
        assert_eq!(read(1, 250), [1, 2], "on disk");
        assert_eq!(read(2, 1), [2], "one entry whatever the budget");
        let (done, durable) = signal();
        writer.append(sized(5..=6), done).unwrap();
        // Staged or already stored, the answer is the same.
        assert_eq!(read(4, 250), [4, 5]);
        assert_eq!(read(5, 150), [5]);
        assert_eq!(read(1, u64::MAX), [1, 2, 3, 4, 5, 6]);
        durable.recv_timeout(WAIT).unwrap().unwrap();
        assert_eq!(read(4, 250), [4, 5]);
    }

    #[test]
    fn a_truncation_and_the_appends_after_it_reach_the_disk_in_order() {
        let (_dir, log, writer) = open();
        let (done, first) = signal();
        writer.append(entries(1..=4, "old"), done).unwrap();
        let (done, truncated) = signal();
        writer.truncate(3, done).unwrap();
        assert_eq!(tags(&writer.range(1, 10).unwrap()), ["old1", "old2"]);
        let (done, second) = signal();
        writer.append(entries(3..=5, "new"), done).unwrap();
        for rx in [first, truncated, second] {
            rx.recv_timeout(WAIT).unwrap().unwrap();
        }
        let expected = ["old1", "old2", "new3", "new4", "new5"];
        assert_eq!(tags(&writer.range(1, 10).unwrap()), expected);
        assert_eq!(tags(&log.range(1, 10).unwrap()), expected, "on disk");
        assert_eq!(writer.last().unwrap().map(|(i, _)| i), Some(5));
    }

    #[test]
    fn a_purge_removes_the_prefix_with_its_marker() {
        let (_dir, log, writer) = open();
        let (done, appended) = signal();
        writer.append(entries(1..=5, "e"), done).unwrap();
        let (done, purged) = signal();
        writer.purge(3, b"marker".to_vec(), done).unwrap();
        appended.recv_timeout(WAIT).unwrap().unwrap();
        purged.recv_timeout(WAIT).unwrap().unwrap();
        assert_eq!(tags(&writer.range(0, 10).unwrap()), ["e4", "e5"]);
        assert_eq!(
            log.get_meta(super::super::log::meta::LAST_PURGED).unwrap(),
            Some(b"marker".to_vec())
        );
    }

    #[test]
    fn a_gap_in_one_append_is_refused_and_reported() {
        let (_dir, _log, writer) = open();
        let (done, result) = signal();
        writer
            .append(vec![(1, b"x".to_vec()), (3, b"y".to_vec())], done)
            .unwrap();
        let err = result.recv_timeout(WAIT).unwrap().unwrap_err();
        assert!(err.to_string().contains("expected 2"), "{err}");
    }
}
