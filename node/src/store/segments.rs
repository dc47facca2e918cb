//! The Raft log's entries in append-only segment files: each entry is written once.
//!
//! Why: in RocksDB every entry went to the WAL, then to a memtable, then (unless purged
//! first) to an SST at the next flush, and compactions rewrote it again; a 64 KiB entry
//! was written two to three times before its purge and cost CPU at every step. Here an
//! entry is one record appended to a file, read back by offset, and dropped with its
//! file (or its file's purged prefix) after the snapshot that covers it.
//!
//! Layout: `log-segments/<index of the segment's first record, 20 digits>.seg`. A segment
//! starts with [`HEADER`] (magic and format byte), then records:
//!
//! ```text
//! 0xCA | payload length u32 LE | crc32 u32 LE (of index and payload) | index u64 LE | payload
//! ```
//!
//! Invariants:
//! - Indexes ascend by one across records and segments (checked at append and at open):
//!   Raft's log has no holes.
//! - Every segment holds at least one live record; a segment whose records are all
//!   truncated or purged is deleted.
//! - A segment may begin, after its header, with a run of zero bytes: its purged prefix,
//!   punched out of the file (or overwritten with zeros where the filesystem cannot punch),
//!   so a purged entry's bytes are in no file (physical erasure, docs/design.md).
//! - Only the last segment may end in a damaged record (a crash mid-append, before the
//!   fsync that would have acknowledged it): open cuts it off there, as RocksDB's
//!   point-in-time WAL recovery did. Damage anywhere else is corruption: open refuses.
//! - Read-side assertions: every record read back is checked for its marker, crc and index.
//! - Bounded: a segment stops taking appends at [`SEGMENT_BYTES`]; a record's payload is
//!   at most [`RECORD_BYTES_MAX`].
//! - Appends are written, not synced: [`SegmentLog::sync`] makes every write so far
//!   durable (one fdatasync per group, `log_writer`). Truncation and purge sync themselves.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::engine::StoreError;

/// Magic and format byte at the start of every segment file.
pub const HEADER: &[u8; 9] = b"CAIRNSEG\x01";
const HEADER_LEN: u64 = HEADER.len() as u64;
const MARKER: u8 = 0xCA;
/// Marker, length, crc, index.
const RECORD_HEADER_LEN: usize = 1 + 4 + 4 + 8;
/// A segment takes no more appends once this long: a purge's rewrite, a truncation and a
/// restart's scan each touch at most about one segment's bytes at a time.
pub const SEGMENT_BYTES: u64 = 16 << 20;
/// Far above any entry the node proposes (a request body is capped well below); a length
/// above it in a record header is damage, not an entry.
pub const RECORD_BYTES_MAX: usize = 256 << 20;
const SUFFIX: &str = ".seg";

/// The log's segments, oldest first.
pub struct SegmentLog {
    dir: PathBuf,
    segments: RwLock<Segments>,
}

#[derive(Default)]
struct Segments {
    list: VecDeque<Segment>,
    /// Files written since the last [`SegmentLog::sync`], and whether the directory changed.
    unsynced: Vec<Arc<File>>,
    dir_changed: bool,
}

struct Segment {
    path: PathBuf,
    file: Arc<File>,
    /// Index of the first live record.
    first: u64,
    /// File offset of each live record: record `i` holds index `first + i`. Never empty.
    offsets: Vec<u64>,
    /// End of the last record: where the next append goes.
    end: u64,
}

impl Segments {
    /// Entries with `start <= index < end`, in order, each record checked: the longest
    /// run from `start` whose records total at most `max_bytes`, and never less than the
    /// first entry (so a caller always makes progress, whatever one entry's size).
    fn range(
        &self,
        start: u64,
        end: u64,
        max_bytes: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        let mut taken = 0;
        for segment in &self.list {
            let from = start.max(segment.first);
            let wanted = end.min(segment.last() + 1);
            if from >= wanted {
                continue;
            }
            // The first record may alone exceed the budget (it is always taken): none is
            // left for the next segment then.
            let mut to = segment.end_within(from, wanted, max_bytes.saturating_sub(taken));
            if out.is_empty() && to == from {
                to = from + 1;
            }
            if to == from {
                break;
            }
            let at = segment.offset_of(from);
            taken += segment.end_of(to - 1) - at;
            let mut bytes = vec![0; (segment.end_of(to - 1) - at) as usize];
            segment.file.read_exact_at(&mut bytes, at)?;
            let mut pos = 0;
            for index in from..to {
                let record = decode_record(&bytes[pos..]).and_then(|r| r.expect_index(index));
                let record = record.map_err(|why| damaged(&segment.path, at + pos as u64, &why))?;
                out.push((index, record.payload.to_vec()));
                pos += record.len;
            }
            if to < wanted {
                // The budget ends inside this segment: a later one would leave a gap.
                break;
            }
        }
        Ok(out)
    }
}

impl Segment {
    fn last(&self) -> u64 {
        self.first + self.offsets.len() as u64 - 1
    }

    fn contains(&self, index: u64) -> bool {
        (self.first..=self.last()).contains(&index)
    }

    fn offset_of(&self, index: u64) -> u64 {
        self.offsets[(index - self.first) as usize]
    }

    /// Writes `records` (encoded, starting at the offsets `starts` within them) after
    /// the last record.
    fn write(&mut self, records: &[u8], starts: &[u64]) -> Result<(), StoreError> {
        self.file.write_all_at(records, self.end)?;
        let base = self.end;
        self.offsets.extend(starts.iter().map(|start| base + start));
        self.end += records.len() as u64;
        Ok(())
    }

    /// The end (exclusive) of the longest run of records `from..to` whose bytes fit in
    /// `budget`; `from` if not even the first fits.
    fn end_within(&self, from: u64, to: u64, budget: u64) -> u64 {
        let at = self.offset_of(from);
        let mut end = from;
        while end < to && self.end_of(end) - at <= budget {
            end += 1;
        }
        end
    }

    /// Where the record after `index` starts (the file's end after the last one).
    fn end_of(&self, index: u64) -> u64 {
        if index == self.last() {
            self.end
        } else {
            self.offset_of(index + 1)
        }
    }
}

impl SegmentLog {
    /// Opens (creating if needed) the segments under `dir`, cuts a damaged tail off the
    /// last one, and finishes a purge through `purged_through` that a crash interrupted.
    pub fn open(dir: &Path, purged_through: Option<u64>) -> Result<SegmentLog, StoreError> {
        fs::create_dir_all(dir)?;
        let names = segment_files(dir)?;
        let mut list = VecDeque::new();
        for (i, (first_written, path)) in names.iter().enumerate() {
            let is_last = i + 1 == names.len();
            let expected = list.back().map(|s: &Segment| s.last() + 1);
            match scan(path, *first_written, expected, is_last)? {
                Some(segment) => list.push_back(segment),
                None => fs::remove_file(path)?,
            }
        }
        let log = SegmentLog {
            dir: dir.to_path_buf(),
            segments: RwLock::new(Segments {
                list,
                unsynced: Vec::new(),
                dir_changed: false,
            }),
        };
        if let Some(through) = purged_through {
            log.purge(through)?;
        }
        log.sync()?;
        Ok(log)
    }

    /// Writes `entries` after the last one (no fsync: see [`SegmentLog::sync`]).
    ///
    /// - Indexes must be consecutive, and follow the log's last index if it has one
    ///   (checked, before anything is written).
    pub fn append(&self, entries: &[(u64, &[u8])]) -> Result<(), StoreError> {
        let Some(&(first, _)) = entries.first() else {
            return Ok(());
        };
        // Encoded (and checksummed) before taking the lock that readers wait on.
        let (records, starts) = encode_records(entries)?;
        let mut segments = self.write();
        if let Some(expected) = segments.list.back().map(|s| s.last() + 1) {
            if first != expected {
                return Err(StoreError::Invariant(format!(
                    "log append at index {first}, expected {expected}"
                )));
            }
        }
        // A segment joins the list only once it holds a record: the list never holds an
        // empty one, even after a failed write.
        let file = match segments.list.back_mut() {
            Some(active) if active.end < SEGMENT_BYTES => {
                active.write(&records, &starts)?;
                active.file.clone()
            }
            _ => {
                let mut segment = self.create(first)?;
                segment.write(&records, &starts)?;
                let file = segment.file.clone();
                segments.list.push_back(segment);
                segments.dir_changed = true;
                file
            }
        };
        if !segments.unsynced.iter().any(|f| Arc::ptr_eq(f, &file)) {
            segments.unsynced.push(file);
        }
        Ok(())
    }

    /// Makes every append so far durable: an fdatasync of each file written since the
    /// last call, then of the directory if a segment was created.
    pub fn sync(&self) -> Result<(), StoreError> {
        let (files, dir_changed) = {
            let mut segments = self.write();
            let files = std::mem::take(&mut segments.unsynced);
            (files, std::mem::replace(&mut segments.dir_changed, false))
        };
        for file in files {
            file.sync_data()?;
        }
        if dir_changed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Removes every entry with index >= `from`, durably, before returning.
    ///
    /// - Later segments go first, from the last one back, so that a crash part-way leaves
    ///   a log that is a prefix of the one before: never a hole.
    pub fn truncate(&self, from: u64) -> Result<(), StoreError> {
        let mut segments = self.write();
        while let Some(last) = segments.list.back() {
            if last.first < from {
                break;
            }
            let gone = segments.list.pop_back().expect("just seen");
            fs::remove_file(&gone.path)?;
            sync_dir(&self.dir)?;
        }
        if let Some(last) = segments.list.back_mut().filter(|s| s.contains(from)) {
            let cut = last.offset_of(from);
            last.file.set_len(cut)?;
            // sync_all: the new length is the whole point here, not only the data.
            last.file.sync_all()?;
            last.offsets.truncate((from - last.first) as usize);
            last.end = cut;
        }
        Ok(())
    }

    /// Removes every entry with index <= `through`, durably, before returning: segments
    /// wholly at or below it are deleted, and the purged prefix of the one that straddles
    /// it is punched out (zeroed where the filesystem cannot punch).
    pub fn purge(&self, through: u64) -> Result<(), StoreError> {
        let mut segments = self.write();
        let mut deleted = false;
        while let Some(first) = segments.list.front() {
            if first.last() > through {
                break;
            }
            let gone = segments.list.pop_front().expect("just seen");
            fs::remove_file(&gone.path)?;
            deleted = true;
        }
        if deleted {
            sync_dir(&self.dir)?;
        }
        if let Some(first) = segments.list.front_mut().filter(|s| s.first <= through) {
            let kept_from = first.offset_of(through + 1);
            erase(&first.file, HEADER_LEN, kept_from - HEADER_LEN)?;
            first.file.sync_data()?;
            first.offsets.drain(..(through + 1 - first.first) as usize);
            first.first = through + 1;
        }
        Ok(())
    }

    /// Entries with `start <= index < end`, in order.
    pub fn range(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.range_within(start, end, u64::MAX)
    }

    /// The longest run of entries from `start` (below `end`) whose records total at most
    /// `max_bytes`, and at least the entry at `start`.
    pub fn range_within(
        &self,
        start: u64,
        end: u64,
        max_bytes: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.read().range(start, end, max_bytes)
    }

    /// The entry with the highest index, if any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let segments = self.read();
        match segments.list.back().map(Segment::last) {
            None => Ok(None),
            Some(index) => Ok(segments.range(index, index + 1, u64::MAX)?.pop()),
        }
    }

    /// How many segment files there are, and their live bytes (for `/metrics`).
    pub fn footprint(&self) -> (u64, u64) {
        let segments = self.read();
        let bytes = segments
            .list
            .iter()
            .map(|s| s.end - s.offsets[0] + HEADER_LEN)
            .sum();
        (segments.list.len() as u64, bytes)
    }

    fn create(&self, first: u64) -> Result<Segment, StoreError> {
        let path = self.dir.join(segment_name(first));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.write_all_at(HEADER, 0)?;
        Ok(Segment {
            path,
            file: Arc::new(file),
            first,
            offsets: Vec::new(),
            end: HEADER_LEN,
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, Segments> {
        // Every mutation updates the in-memory index after its file operation succeeded,
        // so a panic elsewhere leaves it describing the files.
        self.segments.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Segments> {
        self.segments.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn segment_name(first: u64) -> String {
    format!("{first:020}{SUFFIX}")
}

/// The segment files under `dir`, by the index in their names, ascending. Other files are
/// refused: nothing else is written here.
fn segment_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut found = Vec::new();
    for item in fs::read_dir(dir)? {
        let path = item?.path();
        let first = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(SUFFIX))
            .filter(|n| n.len() == 20)
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| {
                StoreError::Invariant(format!("{} is not a log segment", path.display()))
            })?;
        found.push((first, path));
    }
    found.sort();
    Ok(found)
}

/// Reads a segment's records, checking each. Returns `None` for a segment with no record
/// left (a crash right after its creation, or a purge of its last record's prefix).
///
/// - `expected`: the index its first live record must have (the previous segment's last
///   plus one), if there is a previous segment.
/// - A damaged record in the last segment ends the log there: the file is cut before it.
fn scan(
    path: &Path,
    first_written: u64,
    expected: Option<u64>,
    is_last: bool,
) -> Result<Option<Segment>, StoreError> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let bytes = fs::read(path)?;
    if bytes.len() < HEADER.len() || &bytes[..HEADER.len()] != HEADER {
        if is_last && HEADER.starts_with(&bytes) {
            return Ok(None); // created, crashed before its header was whole
        }
        return Err(damaged(path, 0, "not a cairn log segment (header)"));
    }
    let mut at = HEADER.len();
    at += bytes[at..].iter().take_while(|b| **b == 0).count(); // the purged prefix
    let mut offsets: Vec<u64> = Vec::new();
    let mut first: Option<u64> = None;
    while at < bytes.len() {
        let want = first.map(|f| f + offsets.len() as u64).or(expected);
        let record = match decode_record(&bytes[at..]) {
            Ok(record) => record,
            Err(why) if is_last => {
                tracing::warn!(segment = %path.display(), offset = at, why,
                    "cutting a damaged log tail (a crash mid-append)");
                break;
            }
            Err(why) => return Err(damaged(path, at as u64, &why)),
        };
        // A whole record with a good crc in the wrong place is not a torn write.
        let record = match want {
            Some(index) => record.expect_index(index),
            None if record.index < first_written => Err(format!(
                "record index {} below the segment's first {first_written}",
                record.index
            )),
            None => Ok(record),
        }
        .map_err(|why| damaged(path, at as u64, &why))?;
        first.get_or_insert(record.index);
        offsets.push(at as u64);
        at += record.len;
    }
    if at < bytes.len() {
        if !is_last {
            return Err(damaged(path, at as u64, "unreadable record"));
        }
        file.set_len(at as u64)?;
        file.sync_all()?;
    }
    Ok(first.map(|first| Segment {
        path: path.to_path_buf(),
        file: Arc::new(file),
        first,
        offsets,
        end: at as u64,
    }))
}

/// The records of `entries`, one after another, and where each starts.
///
/// - Indexes must be consecutive; payloads at most [`RECORD_BYTES_MAX`].
fn encode_records(entries: &[(u64, &[u8])]) -> Result<(Vec<u8>, Vec<u64>), StoreError> {
    let size = entries
        .iter()
        .map(|(_, b)| RECORD_HEADER_LEN + b.len())
        .sum();
    let mut records = Vec::with_capacity(size);
    let mut starts = Vec::with_capacity(entries.len());
    let first = entries.first().map_or(0, |(index, _)| *index);
    for (expected, (index, payload)) in (first..).zip(entries) {
        if *index != expected {
            return Err(StoreError::Invariant(format!(
                "log append at index {index}, expected {expected}"
            )));
        }
        if payload.len() > RECORD_BYTES_MAX {
            return Err(StoreError::Invariant(format!(
                "log entry {index} of {} bytes is over the {RECORD_BYTES_MAX}-byte limit",
                payload.len()
            )));
        }
        starts.push(records.len() as u64);
        encode_record(&mut records, *index, payload);
    }
    Ok((records, starts))
}

fn encode_record(out: &mut Vec<u8>, index: u64, payload: &[u8]) {
    out.push(MARKER);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(index, payload).to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
}

/// A record read back, its crc checked.
struct Record<'a> {
    index: u64,
    payload: &'a [u8],
    /// Header and payload.
    len: usize,
}

impl Record<'_> {
    fn expect_index(self, expected: u64) -> Result<Self, String> {
        if self.index != expected {
            return Err(format!("record index {}, expected {expected}", self.index));
        }
        Ok(self)
    }
}

/// The record at the start of `bytes`, checked: marker, length within bounds and within
/// `bytes`, crc.
fn decode_record(bytes: &[u8]) -> Result<Record<'_>, String> {
    let header = bytes
        .get(..RECORD_HEADER_LEN)
        .ok_or("record header cut short")?;
    if header[0] != MARKER {
        return Err(format!("record marker {:#04x}", header[0]));
    }
    let len = u32::from_le_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[5..9].try_into().expect("4 bytes"));
    let index = u64::from_le_bytes(header[9..17].try_into().expect("8 bytes"));
    if len > RECORD_BYTES_MAX {
        return Err(format!("record length {len} over the limit"));
    }
    let payload = bytes
        .get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + len)
        .ok_or("record payload cut short")?;
    if checksum(index, payload) != crc {
        return Err("record crc mismatch".to_string());
    }
    Ok(Record {
        index,
        payload,
        len: RECORD_HEADER_LEN + len,
    })
}

fn checksum(index: u64, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&index.to_le_bytes());
    crc.update(payload);
    crc.finalize()
}

fn damaged(path: &Path, offset: u64, why: &str) -> StoreError {
    StoreError::Invariant(format!(
        "log segment {} damaged at offset {offset}: {why}",
        path.display()
    ))
}

/// Erases `len` bytes at `offset`: punched out of the file (its blocks freed, reads give
/// zeros), or overwritten with zeros where the filesystem cannot punch.
fn erase(file: &File, offset: u64, len: u64) -> Result<(), StoreError> {
    if len == 0 {
        return Ok(());
    }
    let (Ok(off), Ok(size)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(StoreError::Invariant(format!(
            "erase of {len} bytes at {offset}"
        )));
    };
    // SAFETY: fallocate on a file descriptor we own; no memory is shared with the kernel.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            size,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(err.into());
    }
    zero(file, offset, len)
}

fn zero(file: &File, offset: u64, len: u64) -> Result<(), StoreError> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        file.write_all_at(&zeros[..n as usize], offset + done)?;
        done += n;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(index: u64, bytes: usize) -> Vec<u8> {
        let tag = format!("entry-{index}-");
        tag.bytes().cycle().take(bytes.max(tag.len())).collect()
    }

    fn append(log: &SegmentLog, indexes: std::ops::RangeInclusive<u64>, bytes: usize) {
        let owned: Vec<(u64, Vec<u8>)> = indexes.map(|i| (i, payload(i, bytes))).collect();
        let entries: Vec<(u64, &[u8])> = owned.iter().map(|(i, b)| (*i, &b[..])).collect();
        log.append(&entries).unwrap();
        log.sync().unwrap();
    }

    /// A log under `dir` holding entries 1..=`last` of `bytes` each, one sync per entry
    /// (so it rolls over to new segments as a running node's would).
    fn filled(dir: &Path, last: u64, bytes: usize) -> SegmentLog {
        let log = SegmentLog::open(dir, None).unwrap();
        for i in 1..=last {
            append(&log, i..=i, bytes);
        }
        log
    }

    fn indexes(log: &SegmentLog) -> Vec<u64> {
        log.range(0, u64::MAX)
            .unwrap()
            .iter()
            .map(|(i, _)| *i)
            .collect()
    }

    fn files(dir: &Path) -> Vec<PathBuf> {
        segment_files(dir)
            .unwrap()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }

    /// Whether any segment file under `dir` contains `needle`.
    fn on_disk(dir: &Path, needle: &[u8]) -> bool {
        files(dir).iter().any(|f| {
            fs::read(f)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
        })
    }

    #[test]
    fn appended_entries_read_back_in_order_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let log = SegmentLog::open(dir.path(), None).unwrap();
        assert_eq!(log.last().unwrap(), None);
        append(&log, 1..=3, 10);
        append(&log, 4..=4, 10);
        assert_eq!(
            log.range(2, 4).unwrap(),
            vec![(2, payload(2, 10)), (3, payload(3, 10))]
        );
        drop(log);

        let log = SegmentLog::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), [1, 2, 3, 4]);
        assert_eq!(log.last().unwrap(), Some((4, payload(4, 10))));
        append(&log, 5..=5, 10);
        assert_eq!(files(dir.path()).len(), 1, "one segment until it is full");
    }

    #[test]
    fn a_gap_or_a_repeat_is_refused_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = SegmentLog::open(dir.path(), None).unwrap();
        append(&log, 1..=2, 10);
        type Entries<'a> = &'a [(u64, &'a [u8])];
        let cases: [(Entries, &str); 3] = [
            (&[(4, b"x")], "at index 4, expected 3"),
            (&[(2, b"x")], "at index 2, expected 3"),
            (&[(3, b"x"), (5, b"y")], "at index 5, expected 4"),
        ];
        for (bad, why) in cases {
            let err = log.append(bad).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
        assert_eq!(indexes(&log), [1, 2]);
    }

    #[test]
    fn a_full_segment_rolls_over_and_reads_span_segments() {
        let dir = tempfile::tempdir().unwrap();
        let per_entry = 64 << 10;
        let entries = SEGMENT_BYTES / per_entry as u64 + 40;
        let log = filled(dir.path(), entries, per_entry);
        assert_eq!(files(dir.path()).len(), 2);
        let across = log.range(entries - 60, entries - 10).unwrap();
        assert_eq!(across.len(), 50);
        assert!(across.iter().all(|(i, b)| *b == payload(*i, per_entry)));
        drop(log);
        let log = SegmentLog::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), (1..=entries).collect::<Vec<_>>());
    }

    #[test]
    fn a_byte_budget_cuts_a_range_after_whole_records_within_and_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let per_entry = 64 << 10;
        let record = (RECORD_HEADER_LEN + per_entry) as u64;
        let entries = SEGMENT_BYTES / per_entry as u64 + 40;
        let log = filled(dir.path(), entries, per_entry);
        let found = |start: u64, max_bytes: u64| -> Vec<u64> {
            let got = log.range_within(start, entries + 1, max_bytes).unwrap();
            assert!(got.iter().all(|(i, b)| *b == payload(*i, per_entry)));
            got.iter().map(|(i, _)| *i).collect()
        };
        assert_eq!(found(5, 3 * record), [5, 6, 7]);
        assert_eq!(
            found(5, 3 * record + record / 2),
            [5, 6, 7],
            "whole records only"
        );
        assert_eq!(found(5, 1), [5], "the first record whatever the budget");
        // The second segment starts below this run's end: the budget spans both files.
        let start = entries - 60;
        assert_eq!(
            found(start, 50 * record),
            (start..start + 50).collect::<Vec<_>>()
        );
        assert_eq!(found(start, u64::MAX).len(), 61);
        // A first record over the budget that ends its segment: nothing more, from either
        // segment (this overflowed the remaining budget and panicked).
        for start in start - 100..start + 50 {
            assert_eq!(found(start, 1), [start]);
            assert_eq!(found(start, record + 1), [start]);
        }
    }

    #[test]
    fn truncation_removes_the_suffix_across_segments_durably() {
        let dir = tempfile::tempdir().unwrap();
        let log = filled(dir.path(), 40, 1 << 20);
        assert!(files(dir.path()).len() >= 3);
        log.truncate(10).unwrap();
        assert_eq!(indexes(&log), (1..=9).collect::<Vec<_>>());
        assert_eq!(files(dir.path()).len(), 1);
        append(&log, 10..=11, 10);
        drop(log);
        let log = SegmentLog::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), (1..=11).collect::<Vec<_>>());
        assert_eq!(log.last().unwrap(), Some((11, payload(11, 10))));
        log.truncate(1).unwrap();
        assert!(files(dir.path()).is_empty());
        append(&log, 1..=1, 10);
        assert_eq!(indexes(&log), [1]);
    }

    #[test]
    fn a_purge_deletes_whole_segments_and_erases_the_prefix_of_the_one_it_straddles() {
        let dir = tempfile::tempdir().unwrap();
        let log = filled(dir.path(), 40, 1 << 20);
        let straddled = files(dir.path())[1].clone();
        let purged = 20;
        assert!(
            on_disk(dir.path(), &payload(purged, 64)),
            "positive control"
        );
        log.purge(purged).unwrap();

        assert_eq!(indexes(&log), (21..=40).collect::<Vec<_>>());
        assert_eq!(
            files(dir.path())[0],
            straddled,
            "the first segment is gone whole"
        );
        for i in 1..=purged {
            assert!(
                !on_disk(dir.path(), &payload(i, 64)),
                "entry {i}'s bytes are still on disk"
            );
        }
        assert!(on_disk(dir.path(), &payload(purged + 1, 64)));
        drop(log);

        let log = SegmentLog::open(dir.path(), Some(purged)).unwrap();
        assert_eq!(indexes(&log), (21..=40).collect::<Vec<_>>());
        append(&log, 41..=41, 10);
        log.purge(41).unwrap();
        assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
        assert_eq!(log.last().unwrap(), None);
        append(&log, 42..=42, 10);
        assert_eq!(indexes(&log), [42]);
    }

    #[test]
    fn open_finishes_a_purge_that_a_crash_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        append(&SegmentLog::open(dir.path(), None).unwrap(), 1..=10, 100);
        // The marker said "through 6" and the process died before the files changed.
        let log = SegmentLog::open(dir.path(), Some(6)).unwrap();
        assert_eq!(indexes(&log), [7, 8, 9, 10]);
        assert!(!on_disk(dir.path(), &payload(6, 64)));
    }

    #[test]
    fn a_torn_last_record_is_cut_off_and_appends_continue_after_the_last_whole_one() {
        let dir = tempfile::tempdir().unwrap();
        append(&SegmentLog::open(dir.path(), None).unwrap(), 1..=5, 100);
        let path = files(dir.path())[0].clone();
        let whole = fs::metadata(&path).unwrap().len();
        let mut record = Vec::new();
        encode_record(&mut record, 6, &payload(6, 100));
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&record[..40], whole).unwrap(); // the crash came mid-write

        let log = SegmentLog::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), [1, 2, 3, 4, 5]);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            whole,
            "cut at the last whole record"
        );
        append(&log, 6..=6, 100);
        drop(log);
        assert_eq!(
            indexes(&SegmentLog::open(dir.path(), None).unwrap()),
            [1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    fn a_segment_created_just_before_a_crash_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        append(&SegmentLog::open(dir.path(), None).unwrap(), 1..=3, 10);
        fs::write(dir.path().join(segment_name(4)), &HEADER[..4]).unwrap();
        let log = SegmentLog::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), [1, 2, 3]);
        assert_eq!(files(dir.path()).len(), 1);
    }

    #[test]
    fn damage_before_the_last_segment_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(filled(dir.path(), 20, 1 << 20));
        let first = files(dir.path())[0].clone();
        let mut bytes = fs::read(&first).unwrap();
        bytes[HEADER.len() + RECORD_HEADER_LEN + 7] ^= 0x01; // inside entry 1's payload
        fs::write(&first, bytes).unwrap();

        let err = SegmentLog::open(dir.path(), None)
            .err()
            .expect("opened a damaged log");
        let text = err.to_string();
        assert!(text.contains("damaged") && text.contains("crc"), "{text}");
    }

    #[test]
    fn a_record_read_back_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let log = SegmentLog::open(dir.path(), None).unwrap();
        append(&log, 1..=3, 100);
        let path = files(dir.path())[0].clone();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let at = HEADER_LEN + (RECORD_HEADER_LEN + 100) as u64 + 30; // entry 2's payload
        file.write_all_at(b"!", at).unwrap();
        let err = log.range(1, 4).unwrap_err().to_string();
        assert!(err.contains("crc"), "{err}");
        assert_eq!(log.range(1, 2).unwrap().len(), 1, "entry 1 is intact");
    }

    #[test]
    fn a_file_that_is_not_a_segment_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
        let err = SegmentLog::open(dir.path(), None).err().expect("opened");
        assert!(err.to_string().contains("not a log segment"), "{err}");
    }

    #[test]
    fn zeroing_overwrites_every_byte_of_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, vec![7u8; (3 << 20) + 5]).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        zero(&file, 3, (2 << 20) + 9).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert!(bytes[..3].iter().all(|b| *b == 7));
        assert!(bytes[3..3 + (2 << 20) + 9].iter().all(|b| *b == 0));
        assert!(bytes[3 + (2 << 20) + 9..].iter().all(|b| *b == 7));
    }

    /// What a crash can leave of the last segment, and what open makes of it.
    mod crash {
        use proptest::prelude::*;
        use proptest::sample::Index;

        use super::*;

        /// Appends one entry per size (index 1, 2, ...), synced, and returns the
        /// segment's path and each record's end offset.
        fn written(dir: &Path, sizes: &[usize]) -> (PathBuf, Vec<u64>) {
            let log = SegmentLog::open(dir, None).unwrap();
            for (i, size) in sizes.iter().enumerate() {
                let index = i as u64 + 1;
                append(&log, index..=index, *size);
            }
            let mut end = HEADER_LEN;
            let ends = sizes
                .iter()
                .enumerate()
                .map(|(i, size)| {
                    end += (RECORD_HEADER_LEN + payload(i as u64 + 1, *size).len()) as u64;
                    end
                })
                .collect();
            (files(dir)[0].clone(), ends)
        }

        /// Open must give back exactly entries 1..=`whole`, cut the file right after the
        /// last of them (so no later append can land before stale records that would
        /// then read as its successors), and take the next append.
        fn reopens_to(
            dir: &Path,
            sizes: &[usize],
            ends: &[u64],
            whole: usize,
        ) -> Result<(), TestCaseError> {
            let log =
                SegmentLog::open(dir, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let got = log.range(0, u64::MAX).unwrap();
            prop_assert_eq!(got.len(), whole);
            for (i, (index, bytes)) in got.iter().enumerate() {
                prop_assert_eq!(*index, i as u64 + 1);
                prop_assert_eq!(bytes, &payload(*index, sizes[i]));
            }
            let lengths: Vec<u64> = files(dir)
                .iter()
                .map(|f| fs::metadata(f).unwrap().len())
                .collect();
            let expected: Vec<u64> = ends[..whole].last().copied().into_iter().collect();
            prop_assert_eq!(lengths, expected);
            let next = whole as u64 + 1;
            append(&log, next..=next, 10);
            drop(log);
            // The next open finds the new entry right after the kept ones: the damage is
            // gone from the file, not only skipped.
            let log =
                SegmentLog::open(dir, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(log.range(0, u64::MAX).unwrap().len(), whole + 1);
            prop_assert_eq!(log.last().unwrap(), Some((next, payload(next, 10))));
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            /// A write cut short anywhere (and followed by any junk the disk kept) loses
            /// only the records not wholly before the cut.
            #[test]
            fn a_torn_tail_leaves_the_whole_records_before_it(
                sizes in proptest::collection::vec(1usize..3_000, 1..24),
                cut in any::<Index>(),
                mut junk in proptest::collection::vec(any::<u8>(), 0..64),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let (path, ends) = written(dir.path(), &sizes);
                let len = *ends.last().unwrap();
                let cut = HEADER_LEN + cut.index((len - HEADER_LEN + 1) as usize) as u64;
                // Junk that starts with the very byte that was cut off would put the torn
                // record back whole (seen: one junk byte equal to a record's last byte):
                // junk differs from what it overwrites, from its first byte on.
                let original = fs::read(&path).unwrap();
                if let (Some(first), Some(was)) = (junk.first_mut(), original.get(cut as usize)) {
                    if first == was {
                        *first ^= 0xff;
                    }
                }
                let file = OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len(cut).unwrap();
                file.write_all_at(&junk, cut).unwrap();
                let whole = ends.iter().filter(|end| **end <= cut).count();
                reopens_to(dir.path(), &sizes, &ends, whole)?;
            }

            /// Any one byte damaged inside the last segment's records ends the log just
            /// before the record holding it (point-in-time recovery), never inside it.
            #[test]
            fn a_damaged_record_ends_the_log_before_it(
                sizes in proptest::collection::vec(1usize..3_000, 1..24),
                at in any::<Index>(),
                flip in 1u8..=255,
            ) {
                let dir = tempfile::tempdir().unwrap();
                let (path, ends) = written(dir.path(), &sizes);
                let len = *ends.last().unwrap();
                let at = HEADER_LEN + at.index((len - HEADER_LEN) as usize) as u64;
                let mut bytes = fs::read(&path).unwrap();
                bytes[at as usize] ^= flip;
                fs::write(&path, bytes).unwrap();
                let whole = ends.iter().filter(|end| **end <= at).count();
                reopens_to(dir.path(), &sizes, &ends, whole)?;
            }
        }
    }
}
