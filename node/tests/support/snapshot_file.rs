//! The layout of a snapshot file as this build writes it (`store/snapshot.rs`): the magic
//! `CAIRNSNZ`, a format byte, one LZ4 frame, and the sha256 of everything before it.

use std::io::Read;

pub const MAGIC: &[u8; 8] = b"CAIRNSNZ";
/// Magic and format byte.
pub const PREFIX_BYTES: usize = 9;
pub const DIGEST_BYTES: usize = 32;

/// What the LZ4 frame of a snapshot file decodes to (its header, records and record
/// count), or `None` for bytes that are not such a file.
pub fn frame_content(file: &[u8]) -> Option<std::io::Result<Vec<u8>>> {
    if !file.starts_with(MAGIC) || file.len() < PREFIX_BYTES + DIGEST_BYTES {
        return None;
    }
    let frame = &file[PREFIX_BYTES..file.len() - DIGEST_BYTES];
    let mut content = Vec::new();
    Some(lz4::Decoder::new(frame).and_then(|mut d| d.read_to_end(&mut content).map(|_| content)))
}
