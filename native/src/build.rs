//! Destination batches from a `RecordSet`: `replicator/model/batching.py`'s `build` and
//! `build_placed`, decision for decision, writing what aiokafka's `BatchBuilder` writes.

use std::collections::{HashMap, HashSet};

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::fetch::RecordSet;
use crate::provenance::{Mark, Tagger, ORIGIN, UPSTREAM};
use crate::wire::{self, Record, HAS_PROVENANCE_KEY, NON_UTF8_KEY};

/// A closed destination batch as aiokafka's producer takes it (the interface of its
/// `BatchBuilder` that `MessageBatch` uses): its bytes are final but for the producer state,
/// stamped at send time with the CRC computed again.
#[pyclass(module = "replicator._native")]
pub struct NativeBatch {
    buf: Vec<u8>,
    count: i32,
}

#[pymethods]
impl NativeBatch {
    fn _set_producer_state(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        let buf = &mut self.buf;
        buf[wire::PRODUCER_ID_AT..wire::PRODUCER_ID_AT + 8]
            .copy_from_slice(&producer_id.to_be_bytes());
        buf[wire::PRODUCER_EPOCH_AT..wire::PRODUCER_EPOCH_AT + 2]
            .copy_from_slice(&producer_epoch.to_be_bytes());
        buf[wire::BASE_SEQUENCE_AT..wire::BASE_SEQUENCE_AT + 4]
            .copy_from_slice(&base_sequence.to_be_bytes());
        let crc = crc32c::crc32c(&buf[wire::ATTRIBUTES_AT..]);
        buf[wire::CRC_AT..wire::CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    }

    fn _build<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.buf)
    }

    fn record_count(&self) -> i32 {
        self.count
    }

    fn size(&self) -> usize {
        self.buf.len()
    }

    fn closed(&self) -> bool {
        true
    }

    fn close(&self) {}

    /// The producer id it was stamped with (-1: none yet).
    #[getter]
    fn producer_id(&self) -> i64 {
        wire::be_i64(&self.buf, wire::PRODUCER_ID_AT)
    }
}

/// One header to write: key and value (`None`: null).
type Out<'a> = (&'a [u8], Option<&'a [u8]>);

/// A batch being filled (aiokafka's `DefaultRecordBatchBuilder`).
struct Open {
    buf: Vec<u8>,
    first_ts: i64,
    max_ts: i64,
    count: i32,
    raw_keys: bool, // takes header keys that are not UTF-8 (aiokafka's Python builder)
}

impl Open {
    fn new(raw_keys: bool) -> Self {
        Open {
            buf: vec![0u8; wire::HEADER],
            first_ts: 0,
            max_ts: 0,
            count: 0,
            raw_keys,
        }
    }

    /// Append a record whose encoding after its offset delta is `tail`; `false` when full.
    fn append(&mut self, timestamp: i64, tail: &[u8], limit: usize) -> bool {
        let delta = if self.count == 0 {
            0
        } else {
            timestamp - self.first_ts
        };
        let body =
            1 + wire::varint_size(delta) + wire::varint_size(i64::from(self.count)) + tail.len();
        let required = body + wire::varint_size(body as i64);
        // aiokafka's C builder keeps a batch under its limit, its Python builder at most at it.
        let full = if self.raw_keys {
            required + self.buf.len() > limit
        } else {
            required + self.buf.len() >= limit
        };
        if self.count > 0 && full {
            return false;
        }
        if self.count == 0 {
            self.first_ts = timestamp;
            self.max_ts = timestamp;
        } else {
            self.max_ts = self.max_ts.max(timestamp);
        }
        let buf = &mut self.buf;
        wire::write_varint(buf, body as i64);
        buf.push(0); // attributes
        wire::write_varint(buf, delta);
        wire::write_varint(buf, i64::from(self.count));
        buf.extend_from_slice(tail);
        self.count += 1;
        true
    }

    /// The batch's final bytes, compressed with `codec`. aiokafka's C builder compresses
    /// always; its Python builder (which the batches taking raw header keys mimic) only when
    /// that makes the batch smaller.
    fn finish(mut self, codec: i16, compress: &Bound<'_, PyAny>) -> PyResult<NativeBatch> {
        let mut attributes = 0i16;
        if codec != 0 {
            let data = PyBytes::new(compress.py(), &self.buf[wire::HEADER..]);
            let packed = compress.call1((codec, data))?;
            let packed = packed.cast::<PyBytes>()?.as_bytes();
            if !self.raw_keys || packed.len() < self.buf.len() - wire::HEADER {
                self.buf.truncate(wire::HEADER);
                self.buf.extend_from_slice(packed);
                attributes = codec;
            }
        }
        let buf = &mut self.buf;
        let length = (buf.len() - wire::FRAMING) as i32;
        let last_offset_delta = (self.count - 1).max(0);
        let mut header = Vec::with_capacity(wire::HEADER);
        header.extend_from_slice(&0i64.to_be_bytes());
        header.extend_from_slice(&length.to_be_bytes());
        header.extend_from_slice(&(-1i32).to_be_bytes());
        header.push(2);
        header.extend_from_slice(&0u32.to_be_bytes());
        header.extend_from_slice(&attributes.to_be_bytes());
        header.extend_from_slice(&last_offset_delta.to_be_bytes());
        header.extend_from_slice(&self.first_ts.to_be_bytes());
        header.extend_from_slice(&self.max_ts.to_be_bytes());
        header.extend_from_slice(&(-1i64).to_be_bytes());
        header.extend_from_slice(&(-1i16).to_be_bytes());
        header.extend_from_slice(&0i32.to_be_bytes());
        header.extend_from_slice(&self.count.to_be_bytes());
        buf[..wire::HEADER].copy_from_slice(&header);
        let crc = crc32c::crc32c(&buf[wire::ATTRIBUTES_AT..]);
        buf[wire::CRC_AT..wire::CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(NativeBatch {
            buf: self.buf,
            count: self.count,
        })
    }
}

fn write_bytes(out: &mut Vec<u8>, found: Option<&[u8]>) {
    match found {
        Some(b) => {
            wire::write_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
        None => wire::write_varint(out, -1),
    }
}

/// A record's encoding after its offset delta: key, value, headers.
fn encode_tail(out: &mut Vec<u8>, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Out<'_>]) {
    out.clear();
    write_bytes(out, key);
    write_bytes(out, value);
    wire::write_varint(out, headers.len() as i64);
    for &(k, v) in headers {
        wire::write_varint(out, k.len() as i64);
        out.extend_from_slice(k);
        write_bytes(out, v);
    }
}

/// What the loop rule makes of one record, and the headers its copies carry.
struct Tagged<'a> {
    mark: Option<Mark>, // `None`: untagged
    headers: Vec<Out<'a>>,
    write: bool,
}

/// The loop rule and tagging for `record` (`Tagger.tag` and `Tagger.retag`); `offset_text`
/// holds the new provenance value.
fn tag<'a>(set: &'a RecordSet, record: &Record, tagger: &Tagger, origin: &'a [u8]) -> Tagged<'a> {
    let data = &set.data[..];
    let own = set.headers_of(record);
    let mut headers: Vec<Out<'a>> = Vec::with_capacity(own.len() + 2);
    if record.flags & HAS_PROVENANCE_KEY == 0 {
        headers.extend(
            own.iter()
                .map(|h| (h.key.get(data).unwrap_or(b""), h.value.get(data))),
        );
        headers.push((ORIGIN, Some(origin)));
        return Tagged {
            mark: None,
            headers,
            write: true,
        };
    }
    let mut origins: Vec<Option<&[u8]>> = Vec::new();
    for h in own {
        let key = h.key.get(data).unwrap_or(b"");
        if key == ORIGIN {
            origins.push(h.value.get(data));
        } else if key != UPSTREAM {
            headers.push((key, h.value.get(data)));
        }
    }
    let mark = tagger.marking(&origins);
    if mark != Mark::Derived {
        return Tagged {
            mark: Some(mark),
            headers: Vec::new(),
            write: false,
        };
    }
    headers.extend(origins.iter().map(|&v| (UPSTREAM, v)));
    headers.push((ORIGIN, Some(origin)));
    Tagged {
        mark: Some(mark),
        headers,
        write: true,
    }
}

fn provenance_value(out: &mut Vec<u8>, prefix: &[u8], offset: i64) {
    out.clear();
    out.extend_from_slice(prefix);
    out.extend_from_slice(offset.to_string().as_bytes());
}

/// Counts of records that carried provenance: derived, loop, malformed.
type Marked = (u64, u64, u64);

fn count(marked: &mut Marked, mark: Mark) {
    match mark {
        Mark::Derived => marked.0 += 1,
        Mark::Loop => marked.1 += 1,
        Mark::Malformed => marked.2 += 1,
    }
}

/// A closed batch: the batch (`None`: a range with nothing to write), the source offsets
/// `[first, end)` it covers, its record count, key and value bytes, oldest time, and (placed by
/// key) its destination partition.
type Closed = (
    Option<Py<NativeBatch>>,
    i64,
    i64,
    i32,
    u64,
    i64,
    Option<i64>,
);

struct TargetState {
    start: i64,
    limit: usize,
    codec: i16,
    open: Open,
    first: i64,
    size: u64,
    oldest: i64,
    closed: Vec<Closed>,
    marked: Marked,
}

impl TargetState {
    fn close(&mut self, at: i64, compress: &Bound<'_, PyAny>, raw_keys: bool) -> PyResult<()> {
        let open = std::mem::replace(&mut self.open, Open::new(raw_keys));
        let count = open.count;
        let batch = Py::new(compress.py(), open.finish(self.codec, compress)?)?;
        self.closed.push((
            Some(batch),
            self.first,
            at,
            count,
            self.size,
            self.oldest,
            None,
        ));
        Ok(())
    }

    /// Full, or refusing a header key that is not UTF-8, at `offset`: close the batch there
    /// and open a new one (`batching._Open.restart`).
    fn restart(
        &mut self,
        offset: i64,
        raw_keys: bool,
        compress: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if self.first < offset {
            self.close(offset, compress, raw_keys)?;
        } else {
            self.open = Open::new(raw_keys);
        }
        self.first = offset;
        self.size = 0;
        Ok(())
    }
}

fn non_utf8(record: &Record, tagged: &Tagged<'_>) -> bool {
    record.flags & NON_UTF8_KEY != 0
        && tagged
            .headers
            .iter()
            .any(|(k, _)| std::str::from_utf8(k).is_err())
}

/// `batching.build` for every target `(start, batch size, codec)`: each target's closed batches
/// and counts of records that carried provenance.
#[pyfunction]
#[pyo3(signature = (records, end, tagger, targets, fetched_ms, compress))]
pub fn build(
    records: PyRef<'_, RecordSet>,
    end: i64,
    tagger: PyRef<'_, Tagger>,
    targets: Vec<(i64, usize, i16)>,
    fetched_ms: i64,
    compress: &Bound<'_, PyAny>,
) -> PyResult<Vec<(Vec<Closed>, Marked)>> {
    let set = &*records;
    let mut states: Vec<TargetState> = targets
        .iter()
        .map(|&(start, limit, codec)| TargetState {
            start,
            limit,
            codec,
            open: Open::new(false),
            first: start,
            size: 0,
            oldest: 0,
            closed: Vec::new(),
            marked: (0, 0, 0),
        })
        .collect();
    let low = states.iter().map(|t| t.start).min().unwrap_or(end);
    let (mut origin, mut tail) = (Vec::with_capacity(64), Vec::with_capacity(256));
    let data = &set.data[..];
    for record in &set.records {
        let offset = record.offset;
        if offset < low {
            continue;
        }
        provenance_value(&mut origin, &tagger.prefix, offset);
        let tagged = tag(set, record, &tagger, &origin);
        if let Some(mark) = tagged.mark {
            for t in states.iter_mut().filter(|t| offset >= t.start) {
                count(&mut t.marked, mark);
            }
        }
        if !tagged.write {
            continue;
        }
        let (key, value) = (record.key.get(data), record.value.get(data));
        encode_tail(&mut tail, key, value, &tagged.headers);
        let refused = non_utf8(record, &tagged);
        let size = (record.key.size() + record.value.size()) as u64;
        for t in states.iter_mut() {
            if offset < t.start {
                continue;
            }
            if refused && !t.open.raw_keys {
                t.restart(offset, true, compress)?;
                t.open.append(record.timestamp, &tail, t.limit);
            } else if !t.open.append(record.timestamp, &tail, t.limit) {
                t.restart(offset, refused, compress)?; // a full batch that took such keys
                t.open.append(record.timestamp, &tail, t.limit);
            }
            if t.open.count == 1 {
                t.oldest = if record.timestamp_type != 0 {
                    record.timestamp
                } else {
                    fetched_ms
                };
            }
            t.size += size;
        }
    }
    let mut out = Vec::with_capacity(states.len());
    for mut t in states {
        if t.first < end {
            t.close(end, compress, false)?;
        }
        out.push((t.closed, t.marked));
    }
    Ok(out)
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The destination partition of a record placed by key (`batching.place`).
#[pyfunction]
pub fn place(key: Option<&[u8]>, offset: i64, partitions: i64) -> i64 {
    match key {
        None => offset.rem_euclid(partitions),
        Some(k) => i64::from(murmur2(k) & 0x7fff_ffff) % partitions,
    }
}

/// The open batches of a placed build, one per destination partition (`batching._Chunk`).
struct Chunk<'a> {
    first: i64,
    limit: usize,
    codec: i16,
    open: HashMap<i64, (Open, u64, i64)>, // batch, key and value bytes, oldest
    closed: Vec<Closed>,
    compress: &'a Bound<'a, PyAny>,
}

impl Chunk<'_> {
    fn close(&mut self, at: i64) -> PyResult<()> {
        if self.open.is_empty() {
            self.closed.push((None, self.first, at, 0, 0, 0, None));
        }
        let mut open: Vec<_> = self.open.drain().collect();
        open.sort_by_key(|(d, _)| *d);
        for (d, (batch, size, oldest)) in open {
            let count = batch.count;
            let batch = Py::new(self.compress.py(), batch.finish(self.codec, self.compress)?)?;
            self.closed
                .push((Some(batch), self.first, at, count, size, oldest, Some(d)));
        }
        Ok(())
    }

    fn restart(&mut self, d: i64, offset: i64, oldest: i64, raw_keys: bool) -> PyResult<()> {
        if self.first < offset {
            self.close(offset)?;
            self.first = offset;
        }
        self.open.insert(d, (Open::new(raw_keys), 0, oldest));
        Ok(())
    }
}

/// `batching.build_placed`: batches of the records from `start` to `end`, each to the partition
/// its key gives; with the counts of records that carried provenance, and of those the
/// destination already held (`written`).
#[pyfunction]
#[pyo3(signature = (records, start, end, tagger, partitions, written, limit, codec, fetched_ms, compress))]
#[allow(clippy::too_many_arguments)]
pub fn build_placed(
    records: PyRef<'_, RecordSet>,
    start: i64,
    end: i64,
    tagger: PyRef<'_, Tagger>,
    partitions: i64,
    written: HashSet<i64>,
    limit: usize,
    codec: i16,
    fetched_ms: i64,
    compress: &Bound<'_, PyAny>,
) -> PyResult<(Vec<Closed>, Marked, u64)> {
    let set = &*records;
    let data = &set.data[..];
    let mut chunk = Chunk {
        first: start,
        limit,
        codec,
        open: HashMap::new(),
        closed: Vec::new(),
        compress,
    };
    let (mut marked, mut already_written) = ((0, 0, 0), 0u64);
    let (mut origin, mut tail) = (Vec::with_capacity(64), Vec::with_capacity(256));
    for record in &set.records {
        let offset = record.offset;
        if offset < start {
            continue;
        }
        provenance_value(&mut origin, &tagger.prefix, offset);
        let tagged = tag(set, record, &tagger, &origin);
        if let Some(mark) = tagged.mark {
            count(&mut marked, mark);
        }
        if !tagged.write {
            continue;
        }
        if written.contains(&offset) {
            already_written += 1;
            continue;
        }
        let (key, value) = (record.key.get(data), record.value.get(data));
        let d = place(key, offset, partitions);
        let oldest = if record.timestamp_type != 0 {
            record.timestamp
        } else {
            fetched_ms
        };
        chunk
            .open
            .entry(d)
            .or_insert_with(|| (Open::new(false), 0, oldest));
        encode_tail(&mut tail, key, value, &tagged.headers);
        let raw_keys = non_utf8(record, &tagged);
        let refused = raw_keys && !chunk.open[&d].0.raw_keys;
        let limit = chunk.limit;
        let added = !refused
            && chunk
                .open
                .get_mut(&d)
                .is_some_and(|o| o.0.append(record.timestamp, &tail, limit));
        if !added {
            chunk.restart(d, offset, oldest, raw_keys)?;
            chunk
                .open
                .get_mut(&d)
                .map(|o| o.0.append(record.timestamp, &tail, limit));
        }
        if let Some(o) = chunk.open.get_mut(&d) {
            o.1 += (record.key.size() + record.value.size()) as u64;
        }
    }
    if chunk.first < end {
        chunk.close(end)?;
    }
    Ok((chunk.closed, marked, already_written))
}
