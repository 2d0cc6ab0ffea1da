//! Kafka's record batch format v2 (KIP-98): the batch header, zig-zag varints, the records.
//!
//! Decoding follows aiokafka's decoder check for check (what it calls corrupt is corrupt here),
//! and encoding writes what aiokafka's `DefaultRecordBatchBuilder` writes, byte for byte.

/// Bytes of a v2 batch header, base offset to record count.
pub const HEADER: usize = 61;
/// Base offset (8) and length (4): the framing before the rest of a batch.
pub const FRAMING: usize = 12;
pub const MAGIC_AT: usize = 16;
pub const CRC_AT: usize = 17;
/// The CRC covers the batch from its attributes to its end.
pub const ATTRIBUTES_AT: usize = 21;
pub const PRODUCER_ID_AT: usize = 43;
pub const PRODUCER_EPOCH_AT: usize = 51;
pub const BASE_SEQUENCE_AT: usize = 53;

pub const CODEC_MASK: i16 = 0x07;
pub const TIMESTAMP_TYPE_MASK: i16 = 0x08;
pub const TRANSACTIONAL_MASK: i16 = 0x10;
pub const CONTROL_MASK: i16 = 0x20;

/// A batch that cannot be what it says (aiokafka's `CorruptRecordException`).
#[derive(Debug)]
pub struct Corrupt(pub String);

pub fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
pub fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
pub fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// A zig-zag varint (at most 64 bits), as aiokafka's `decode_varint` reads it.
#[inline]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i64, Corrupt> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let Some(&byte) = buf.get(*pos) else {
            return Err(Corrupt(format!("varint past the end at {}", *pos)));
        };
        *pos += 1;
        if shift > 63 {
            return Err(Corrupt("varint longer than 64 bits".into()));
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
}

#[inline]
pub fn write_varint(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub fn varint_size(value: i64) -> usize {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    let mut size = 1;
    while v >= 0x80 {
        v >>= 7;
        size += 1;
    }
    size
}

/// A byte range of a record set's data; `len` -1 is null.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub start: u32,
    pub len: i32,
}

impl Span {
    pub const NULL: Span = Span { start: 0, len: -1 };
    #[inline]
    pub fn get<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        if self.len < 0 {
            None
        } else {
            Some(&data[self.start as usize..self.start as usize + self.len as usize])
        }
    }
    #[inline]
    pub fn size(&self) -> usize {
        if self.len < 0 {
            0
        } else {
            self.len as usize
        }
    }
}

/// One header of a record: its key (any bytes, as the wire allows) and value.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub key: Span,
    pub value: Span,
}

/// Flags of a decoded record, found while decoding (no second look at its headers).
pub const HAS_PROVENANCE_KEY: u8 = 1; // a header named `replicator` or `replicator-upstream`
pub const NON_UTF8_KEY: u8 = 2; // a header key that is not UTF-8

/// One decoded record: where its parts lie in the record set's data.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: u8,
    pub key: Span,
    pub value: Span,
    pub headers_first: u32,
    pub headers_count: u32,
    pub flags: u8,
}

fn span(buf: &[u8], pos: &mut usize, base: usize, len: i64, what: &str) -> Result<Span, Corrupt> {
    if len < 0 {
        return Ok(Span::NULL);
    }
    if len > i32::MAX as i64 || *pos + len as usize > buf.len() {
        return Err(Corrupt(format!(
            "{what} of {len} bytes past the end of its batch"
        )));
    }
    let found = Span {
        start: (base + *pos) as u32,
        len: len as i32,
    };
    *pos += len as usize;
    Ok(found)
}

/// The batch fields a record needs.
pub struct BatchInfo {
    pub base_offset: i64,
    pub first_timestamp: i64,
    pub max_timestamp: i64,
    pub log_append_time: bool,
}

/// Decode one record of `buf` at `pos` (aiokafka's `_read_msg`), its spans relative to `base`
/// (where `buf` starts in the record set's data); headers appended to `headers`.
pub fn read_record(
    buf: &[u8],
    pos: &mut usize,
    base: usize,
    batch: &BatchInfo,
    headers: &mut Vec<Header>,
) -> Result<Record, Corrupt> {
    let length = read_varint(buf, pos)?;
    let start = *pos;
    read_varint(buf, pos)?; // attributes: unused
    let ts_delta = read_varint(buf, pos)?;
    let timestamp = if batch.log_append_time {
        batch.max_timestamp
    } else {
        batch.first_timestamp.wrapping_add(ts_delta)
    };
    let offset_delta = read_varint(buf, pos)?;
    let key_len = read_varint(buf, pos)?;
    let key = span(buf, pos, base, key_len, "a key")?;
    let value_len = read_varint(buf, pos)?;
    let value = span(buf, pos, base, value_len, "a value")?;
    let count = read_varint(buf, pos)?;
    if count < 0 {
        return Err(Corrupt(format!(
            "Found invalid number of record headers {count}"
        )));
    }
    let first = headers.len() as u32;
    let mut flags = 0u8;
    for _ in 0..count {
        let key_len = read_varint(buf, pos)?;
        if key_len < 0 {
            return Err(Corrupt(format!(
                "Invalid negative header key size {key_len}"
            )));
        }
        let key = span(buf, pos, base, key_len, "a header key")?;
        let raw = &buf[key.start as usize - base..key.start as usize - base + key.len as usize];
        if raw == b"replicator" || raw == b"replicator-upstream" {
            flags |= HAS_PROVENANCE_KEY;
        } else if !raw.is_ascii() && std::str::from_utf8(raw).is_err() {
            flags |= NON_UTF8_KEY;
        }
        let value_len = read_varint(buf, pos)?;
        let value = span(buf, pos, base, value_len, "a header value")?;
        headers.push(Header { key, value });
    }
    if (*pos - start) as i64 != length {
        return Err(Corrupt(format!(
            "Invalid record size: expected to read {length} bytes in record payload, but instead read {}",
            *pos - start
        )));
    }
    Ok(Record {
        offset: batch.base_offset.wrapping_add(offset_delta),
        timestamp,
        timestamp_type: u8::from(batch.log_append_time),
        key,
        value,
        headers_first: first,
        headers_count: count as u32,
        flags,
    })
}
