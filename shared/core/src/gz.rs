//! gzip members (RFC 1952) written with a raw-deflate compressor that is reused: a new one (a
//! `GzEncoder` per record) zeroes ~300 KB of state each time, which profiled as a tenth of a
//! local crawl's CPU. A WARC file is a series of members, one per record (the Common Crawl
//! convention, so readers can seek to a record).

use flate2::{Compress, Compression, Crc, FlushCompress, Status};
use std::cell::RefCell;

/// Most room made in the output buffer before one step of the compressor.
const STEP_ROOM: usize = 64 * 1024;

/// Room for `input` compressed: what deflate's fastest level may make of it at worst (static
/// codes, 9 bits for a literal byte) and a stream's end. Asking for a fixed 64 KB each step
/// instead grew a page's small buffer past a fresh 64 KB one per member, copied and faulted in:
/// 5% of a local crawl's CPU (perf, the 5,000-page site). A step short of room takes another.
fn room_for(input: &[u8]) -> usize {
    (input.len() + input.len() / 8 + 64).min(STEP_ROOM)
}

/// A member's header: no name, no time, the compression level's hint, OS unknown (what
/// flate2's `GzEncoder` writes).
pub(crate) fn header(level: Compression) -> [u8; 10] {
    let extra_flags = match level.level() {
        9.. => 2,
        0 | 1 => 4,
        _ => 0,
    };
    [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, extra_flags, 255]
}

/// Runs the compressor over all of `input` (and to the stream's end with `Finish`).
pub(crate) fn deflate_into(
    deflate: &mut Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> std::io::Result<()> {
    loop {
        out.reserve(room_for(input));
        let before = deflate.total_in();
        let status = deflate
            .compress_vec(input, out, flush)
            .map_err(std::io::Error::other)?;
        let consumed =
            usize::try_from(deflate.total_in() - before).map_err(std::io::Error::other)?;
        input = input.get(consumed..).unwrap_or_default();
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            _ => input.is_empty(),
        };
        if done {
            return Ok(());
        }
    }
}

thread_local! {
    /// This thread's compressor at zlib's fastest level, reset between members.
    static FAST: RefCell<Compress> = RefCell::new(Compress::new(Compression::fast(), false));
}

/// Appends to `out` one member holding `parts` one after the other, at zlib's fastest level.
pub(crate) fn fast_member(parts: &[&[u8]], out: &mut Vec<u8>) -> std::io::Result<()> {
    out.extend_from_slice(&header(Compression::fast()));
    let mut crc = Crc::new();
    FAST.with_borrow_mut(|deflate| {
        deflate.reset();
        for part in parts {
            crc.update(part);
            deflate_into(deflate, part, out, FlushCompress::None)?;
        }
        deflate_into(deflate, &[], out, FlushCompress::Finish)
    })?;
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&crc.amount().to_le_bytes());
    Ok(())
}

/// Bytes of a stored deflate block at most (its length is 16 bits).
const STORED_BLOCK: usize = u16::MAX as usize;

/// Appends to `out` one member holding `data` as deflate's stored (uncompressed) blocks: for a
/// record of a KB or two, zlib-rs's reset between members (128 KB of hash table zeroed) costs
/// more than the compression saves. A page's items (~1.3 KB of JSON on the bench's site) were
/// 1.2% of a local crawl's CPU with extraction, the reset most of it (perf).
pub(crate) fn stored_member(data: &[u8], out: &mut Vec<u8>) {
    out.reserve(data.len() + data.len() / STORED_BLOCK * 5 + 5 + 18);
    out.extend_from_slice(&header(Compression::none()));
    let mut crc = Crc::new();
    crc.update(data);
    let mut blocks = data.chunks(STORED_BLOCK).peekable();
    if blocks.peek().is_none() {
        // An empty stream still has its one final block.
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let last = u8::from(blocks.peek().is_none());
        // A chunk is at most `STORED_BLOCK` long: its length fits.
        let length = block.len() as u16;
        out.push(last);
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&(!length).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&crc.amount().to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::MultiGzDecoder;
    use std::io::Read;

    fn inflated(members: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        MultiGzDecoder::new(members).read_to_end(&mut data).unwrap();
        data
    }

    #[test]
    fn stored_members_read_back_whatever_their_size() {
        // GIVEN data empty, small, exactly one block, and spanning three blocks
        let big: Vec<u8> = (0..2 * STORED_BLOCK + 7).map(|i| (i % 251) as u8).collect();
        for data in [&b""[..], b"{\"items\":[]}", &big[..STORED_BLOCK], &big] {
            // WHEN each is a stored member after a compressed one
            let mut out = Vec::new();
            fast_member(&[b"before"], &mut out).unwrap();
            stored_member(data, &mut out);
            // THEN a gzip reader gives both back, CRC and length checked
            let mut expected = b"before".to_vec();
            expected.extend_from_slice(data);
            assert_eq!(inflated(&out), expected, "{} bytes", data.len());
        }
    }

    #[test]
    fn a_damaged_stored_member_is_refused() {
        // GIVEN a stored member whose data was changed after its CRC was taken
        let mut out = Vec::new();
        stored_member(b"items of a page", &mut out);
        out[15] ^= 1;
        // THEN reading it fails
        let mut data = Vec::new();
        assert!(
            MultiGzDecoder::new(&out[..])
                .read_to_end(&mut data)
                .is_err()
        );
    }
}
