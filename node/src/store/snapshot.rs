//! Snapshot files: the state machine streamed to and from disk, never held in memory whole.
//!
//! File layout (all integers big-endian):
//! ```text
//! "CAIRNSNZ" format:u8 lz4_frame(
//!     header_len:u32 header(codec)
//!     { family:u8 key_len:u32 key val_len:u32 val }*
//!     0xFF record_count:u64 )
//! sha256(every byte of the file before it):32
//! ```
//! Files with the magic `CAIRNSNP` (earlier builds) hold the frame's content uncompressed,
//! then the digest of the bytes before it: they are still read and sent. The digest covers the
//! compressed bytes, not only what they decode to, because LZ4 can decode a changed byte
//! to the same content (a match offset within a run of equal bytes): a corrupted file is
//! refused even then. The frame carries no checksums of its own.
//! - Size: the benchmark's 1M keys made a 759 MiB file uncompressed, 33 MiB with LZ4 (its
//!   values are one repeated character; real text compresses far less).
//! - Erasure: LZ4 keeps the first copy of a byte string it has not seen before as it is,
//!   so the erasure tests' random values are still found in a file that holds them.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rocksdb::{IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::codec;
use super::engine::{cf, Engine, StoreError};
use super::state::{meta, StateEngine};

/// The magic of files this build writes: the stream after the format byte is LZ4.
const MAGIC_LZ4: &[u8; 8] = b"CAIRNSNZ";
/// The magic of uncompressed files (earlier builds): read, never written.
const MAGIC_PLAIN: &[u8; 8] = b"CAIRNSNP";
const END: u8 = 0xFF;
/// Largest key or value a snapshot record may carry (values are ≤ 1 MiB of JSON plus slot
/// metadata); anything larger is corruption.
const RECORD_BYTES_MAX: u32 = 64 << 20;
/// Bytes per write batch while installing: bounds memory on large snapshots.
const INSTALL_BATCH_BYTES_MAX: usize = 8 << 20;
/// Marker in `sm_meta` while an install is in progress (value: snapshot file name).
/// Public so that crash tests can leave one behind, as an interrupted install would.
pub const INSTALLING: &[u8] = b"installing";
/// Upper bound of every key in the state families: UTF-8 never holds 0xFF, and binary keys
/// (big-endian revisions, times) would need 4096 leading 0xFF bytes to reach it.
const ALL_KEYS_END: [u8; 4096] = [0xFF; 4096];

/// What a snapshot says about itself. The blobs are opaque here (openraft's log id and
/// membership, encoded by the consensus layer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub snapshot_id: String,
    pub last_applied: Option<Vec<u8>>,
    pub membership: Option<Vec<u8>>,
}

/// The snapshot directory of one node: at most one current snapshot plus in-flight files.
#[derive(Debug, Clone)]
pub struct SnapshotDir {
    dir: PathBuf,
    /// Held for a whole build (RocksDB snapshot → file → promote) and a whole install
    /// (verify → promote → load). Without it a build could capture a half-installed state,
    /// or promote an older view over a newer installed snapshot.
    exclusive: Arc<Mutex<()>>,
}

impl SnapshotDir {
    pub fn open(dir: PathBuf) -> Result<SnapshotDir, StoreError> {
        fs::create_dir_all(&dir)?;
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "partial") {
                fs::remove_file(&path)?;
            }
        }
        Ok(SnapshotDir {
            dir,
            exclusive: Arc::new(Mutex::new(())),
        })
    }

    /// Serializes snapshot builds and installs (see the field's doc).
    pub fn exclusive(&self) -> MutexGuard<'_, ()> {
        // A panic while holding it leaves nothing half-done that the next holder could
        // trust less than the files on disk, so a poisoned lock is still usable.
        self.exclusive
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The newest complete snapshot file, if any.
    pub fn current(&self) -> Result<Option<PathBuf>, StoreError> {
        let mut best: Option<(u64, PathBuf)> = None;
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "snap") {
                let seq = seq_of(&path);
                if best.as_ref().is_none_or(|(s, _)| seq > *s) {
                    best = Some((seq, path));
                }
            }
        }
        Ok(best.map(|(_, p)| p))
    }

    fn next_seq(&self) -> Result<u64, StoreError> {
        Ok(self.current()?.map(|p| seq_of(&p) + 1).unwrap_or(1))
    }

    /// A fresh `.partial` path for a snapshot being written or received.
    pub fn partial_path(&self) -> Result<PathBuf, StoreError> {
        let nonce: u64 = rand::random();
        Ok(self
            .dir
            .join(format!("{:020}-{nonce:016x}.partial", self.next_seq()?)))
    }

    /// Makes a verified partial file the current snapshot and deletes older ones, whose
    /// bytes may hold values forgotten since.
    pub fn promote(&self, partial: &Path) -> Result<PathBuf, StoreError> {
        let final_path = self.dir.join(format!("{:020}.snap", self.next_seq()?));
        fs::rename(partial, &final_path)?;
        File::open(&self.dir)?.sync_all()?;
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "snap") && path != final_path {
                fs::remove_file(&path)?;
            }
        }
        Ok(final_path)
    }
}

fn seq_of(path: &Path) -> u64 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.split('-').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Writes the whole state machine, as of one RocksDB snapshot, into `path` (fsynced).
/// Returns the header it wrote; `make_id` names the snapshot from the applied log id seen
/// in that same RocksDB snapshot, so the header and the data can never disagree.
pub fn write_file(
    state: &StateEngine,
    path: &Path,
    make_id: impl FnOnce(Option<&[u8]>) -> String,
) -> Result<SnapshotHeader, StoreError> {
    let engine = state.engine();
    let view = engine.state_db().snapshot();
    // Everything this snapshot covers becomes durable here before openraft purges the log
    // behind it (applies bypass the WAL). Flushed after the view is taken, so the flush
    // covers at least the view; the purge then only has a small remainder to flush.
    engine.flush_state()?;
    let sm_meta = engine.cf(cf::SM_META);
    let last_applied = view.get_cf(sm_meta, meta::LAST_APPLIED)?;
    let membership = view.get_cf(sm_meta, meta::MEMBERSHIP)?;
    let header = SnapshotHeader {
        snapshot_id: make_id(last_applied.as_deref()),
        last_applied,
        membership,
    };

    let mut file = HashingWriter::new(BufWriter::with_capacity(1 << 20, File::create(path)?));
    file.write_all(MAGIC_LZ4)?;
    file.write_all(&[codec::FORMAT])?;
    let mut out = lz4::EncoderBuilder::new()
        .checksum(lz4::ContentChecksum::NoChecksum)
        .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
        .build(file)?;
    write_blob(&mut out, &codec::encode(&header))?;
    let mut count: u64 = 0;
    for (family_index, family) in cf::STATE.iter().enumerate() {
        let scan = Engine::full_scan();
        for item in view.iterator_cf_opt(engine.cf(family), scan, IteratorMode::Start) {
            let (k, v) = item?;
            if *family == cf::SM_META && &*k == INSTALLING {
                continue;
            }
            out.write_all(&[family_index as u8])?;
            write_blob(&mut out, &k)?;
            write_blob(&mut out, &v)?;
            count += 1;
        }
    }
    out.write_all(&[END])?;
    out.write_all(&count.to_be_bytes())?;
    let (file, finished) = out.finish();
    finished?;
    let digest = file.hasher.finalize();
    let mut file = file.inner;
    file.write_all(&digest)?;
    let file = file.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(header)
}

/// Reads and checks the header of a snapshot file.
pub fn read_header(path: &Path) -> Result<SnapshotHeader, StoreError> {
    open_stream(path).map(|(_, header)| header)
}

/// A snapshot file as read: every byte hashed as it comes off the disk.
type RawFile = HashingReader<BufReader<File>>;

/// The content of a snapshot file after its magic and format byte.
enum Stream {
    Lz4(lz4::Decoder<RawFile>),
    Plain(RawFile),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Lz4(decoder) => decoder.read(buf),
            Stream::Plain(file) => file.read(buf),
        }
    }
}

impl Stream {
    /// The file after the content, once the content ended where its record count did: an
    /// LZ4 frame must be closed by its end mark (the decoder reads no byte past it).
    fn into_file(self) -> Result<RawFile, StoreError> {
        match self {
            Stream::Plain(file) => Ok(file),
            Stream::Lz4(mut decoder) => {
                if decoder.read(&mut [0u8; 1])? != 0 {
                    return Err(StoreError::Invariant(
                        "bytes after a snapshot's record count".into(),
                    ));
                }
                let (file, ended) = decoder.finish();
                ended?;
                Ok(file)
            }
        }
    }
}

/// Opens a snapshot file of either format: its content after the header, and the header.
fn open_stream(path: &Path) -> Result<(Stream, SnapshotHeader), StoreError> {
    let mut file = HashingReader::new(BufReader::with_capacity(1 << 20, File::open(path)?));
    let mut magic = [0u8; 9];
    file.read_exact(&mut magic)?;
    let mut stream = match (&magic[..8], magic[8]) {
        (m, codec::FORMAT) if m == MAGIC_LZ4 => Stream::Lz4(lz4::Decoder::new(file)?),
        (m, codec::FORMAT) if m == MAGIC_PLAIN => Stream::Plain(file),
        _ => {
            return Err(StoreError::Invariant(
                "not a cairn snapshot file (bad magic or format)".into(),
            ))
        }
    };
    let header = read_blob(&mut stream)?;
    let header = codec::decode(&header).map_err(|source| StoreError::Codec {
        cf: "snapshot header",
        source,
    })?;
    Ok((stream, header))
}

/// Streams through the whole file and checks its record count, its sha256 trailer, and
/// that nothing follows the trailer.
pub fn verify_file(path: &Path) -> Result<SnapshotHeader, StoreError> {
    let (mut stream, header) = open_stream(path)?;
    let count = for_each_record(&mut stream, |_, _, _| Ok(()))?;
    let mut trailer = [0u8; 8];
    stream.read_exact(&mut trailer)?;
    let mut file = stream.into_file()?;
    let expected_digest = file.hasher.clone().finalize();
    let mut digest = [0u8; 32];
    file.inner.read_exact(&mut digest)?;
    let at_end = file.inner.read(&mut [0u8; 1])? == 0;
    if u64::from_be_bytes(trailer) != count || digest[..] != expected_digest[..] || !at_end {
        return Err(StoreError::Invariant(format!(
            "snapshot {} fails its checksum",
            path.display()
        )));
    }
    Ok(header)
}

/// Replaces the state machine with the content of a verified snapshot file.
///
/// - The file is verified before anything is deleted.
/// - An `installing` marker is committed (synced) first and removed last; [`resume`] redoes
///   an install that a crash interrupted.
/// - The bulk of the state bypasses the WAL and is flushed to SST files before the marker
///   is removed: a crash before that loses the unflushed part, and the marker (still on
///   disk) makes [`resume`] redo the install. Through the WAL, a large snapshot would sit
///   on disk twice more (WAL files, then SSTs) until the WAL was recycled: a node that
///   joined at 1M keys used 3-4x the disk of its peers.
pub fn install_file(state: &StateEngine, path: &Path) -> Result<SnapshotHeader, StoreError> {
    let header = verify_file(path)?;
    let engine = state.engine();
    let marker = path.to_string_lossy().into_owned();
    let mut begin = WriteBatch::default();
    begin.put_cf(engine.cf(cf::SM_META), INSTALLING, marker.as_bytes());
    engine.state_db().write_opt(begin, &Engine::synced())?;

    // Nothing fills the cache while this runs (the apply path is busy installing), so
    // once empty it stays empty until the new state is in place.
    engine.slot_cache().clear();
    engine.set_dedup_floor_ms(0);
    let unlogged = Engine::unlogged();
    let mut batch = WriteBatch::default();
    for family in cf::STATE {
        batch.delete_range_cf(engine.cf(family), [].as_slice(), ALL_KEYS_END.as_slice());
    }
    // Deleted with the rest of `sm_meta` above; the synced copy from `begin` is the one
    // that counts until the end.
    batch.put_cf(engine.cf(cf::SM_META), INSTALLING, marker.as_bytes());
    let (mut reader, _) = open_stream(path)?;
    for_each_record(&mut reader, |family, k, v| {
        batch.put_cf(engine.cf(family), k, v);
        if batch.size_in_bytes() >= INSTALL_BATCH_BYTES_MAX {
            engine
                .state_db()
                .write_opt(std::mem::take(&mut batch), &unlogged)?;
        }
        Ok(())
    })?;
    engine.state_db().write_opt(batch, &unlogged)?;
    engine.flush_state()?;
    let mut done = WriteBatch::default();
    done.delete_cf(engine.cf(cf::SM_META), INSTALLING);
    engine.state_db().write_opt(done, &Engine::synced())?;
    Ok(header)
}

/// At open: if an install was interrupted, redo it from the file it was installing.
pub fn resume(state: &StateEngine) -> Result<Option<SnapshotHeader>, StoreError> {
    let Some(path) = state.meta(INSTALLING)? else {
        return Ok(None);
    };
    let path = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
    tracing::warn!(path = %path.display(), "redoing a snapshot install interrupted by a crash");
    install_file(state, &path).map(Some)
}

fn for_each_record(
    reader: &mut impl Read,
    mut f: impl FnMut(&'static str, &[u8], &[u8]) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let mut count = 0u64;
    loop {
        let mut tag = [0u8; 1];
        reader.read_exact(&mut tag)?;
        if tag[0] == END {
            return Ok(count);
        }
        let family = *cf::STATE.get(tag[0] as usize).ok_or_else(|| {
            StoreError::Invariant(format!("snapshot record for unknown family {}", tag[0]))
        })?;
        let k = read_blob(reader)?;
        let v = read_blob(reader)?;
        f(family, &k, &v)?;
        count += 1;
    }
}

fn write_blob(out: &mut impl Write, bytes: &[u8]) -> Result<(), StoreError> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| StoreError::Invariant("record over 4 GiB".into()))?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)?;
    Ok(())
}

fn read_blob(reader: &mut impl Read) -> Result<Vec<u8>, StoreError> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > RECORD_BYTES_MAX {
        return Err(StoreError::Invariant(format!(
            "snapshot record of {len} bytes"
        )));
    }
    let mut buf = vec![0u8; len as usize];
    reader.read_exact(&mut buf)?;
    Ok(buf)
}

struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
        }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> HashingReader<R> {
    fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
        }
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}
