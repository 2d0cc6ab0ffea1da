//! A partition's fetched record set decoded into spans over its bytes (`RecordSet`), as aiokafka's
//! `PartitionRecords` hands records over: complete batches only, records before the fetch
//! position skipped, control batches and (read committed) aborted transactions never handed
//! over, the position after each batch its next offset, CRCs checked.

use std::collections::HashSet;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::wire::{self, BatchInfo, Corrupt, Header, Record};

pyo3::create_exception!(
    _native,
    CorruptBatch,
    PyValueError,
    "A batch that cannot be what it says."
);

/// The records of one partition's fetch, kept as bytes: each record a few spans over `data`
/// (the fetched bytes, compressed batches decompressed).
#[pyclass(frozen, module = "replicator._native")]
pub struct RecordSet {
    pub data: Vec<u8>,
    pub records: Vec<Record>,
    pub headers: Vec<Header>,
    pub payload: u64,
}

impl RecordSet {
    pub fn headers_of(&self, record: &Record) -> &[Header] {
        let first = record.headers_first as usize;
        &self.headers[first..first + record.headers_count as usize]
    }
}

fn bytes_or_none<'py>(py: Python<'py>, found: Option<&[u8]>) -> Bound<'py, PyAny> {
    match found {
        Some(b) => PyBytes::new(py, b).into_any(),
        None => py.None().into_bound(py),
    }
}

#[pymethods]
impl RecordSet {
    fn __len__(&self) -> usize {
        self.records.len()
    }

    fn __bool__(&self) -> bool {
        !self.records.is_empty()
    }

    /// The offset after its last record.
    #[getter]
    fn end(&self) -> PyResult<i64> {
        match self.records.last() {
            Some(r) => Ok(r.offset + 1),
            None => Err(PyValueError::new_err("an empty record set has no end")),
        }
    }

    /// Its first record's offset.
    #[getter]
    fn first(&self) -> PyResult<i64> {
        match self.records.first() {
            Some(r) => Ok(r.offset),
            None => Err(PyValueError::new_err(
                "an empty record set has no first offset",
            )),
        }
    }

    /// Key and value bytes of its records.
    #[getter]
    fn payload_size(&self) -> u64 {
        self.payload
    }

    /// Every record as `(offset, timestamp, timestamp_type, key, value, [(key, value)])`, header
    /// keys as bytes: for tests and for readers that look at records one by one.
    fn records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let data = &self.data[..];
        for r in &self.records {
            let headers = PyList::empty(py);
            for h in self.headers_of(r) {
                let key = PyBytes::new(py, h.key.get(data).unwrap_or(b""));
                headers.append(PyTuple::new(
                    py,
                    [key.into_any(), bytes_or_none(py, h.value.get(data))],
                )?)?;
            }
            out.append((
                r.offset,
                r.timestamp,
                r.timestamp_type,
                bytes_or_none(py, r.key.get(data)),
                bytes_or_none(py, r.value.get(data)),
                headers,
            ))?;
        }
        Ok(out)
    }
}

/// What a fetch of one partition gave: the records, the position after them (past control
/// batches and aborted transactions too), and, when a batch could not be decoded, the offset it
/// stopped at and why (the records before it are handed over).
#[pyclass(frozen, module = "replicator._native")]
pub struct Decoded {
    #[pyo3(get)]
    records: Py<RecordSet>,
    #[pyo3(get)]
    next_offset: i64,
    #[pyo3(get)]
    stopped_at: Option<i64>,
    #[pyo3(get)]
    error: Option<Py<PyAny>>,
}

struct Decoder<'a> {
    next_offset: i64,
    aborted: Vec<(i64, i64)>, // (producer id, first offset), by first offset, consumed from the front
    aborted_at: usize,
    aborting: HashSet<i64>,
    read_committed: bool,
    check_crcs: bool,
    decompress: &'a Bound<'a, PyAny>,
    set: RecordSet,
}

enum Stop {
    Corrupt(Corrupt),
    Undecodable(PyErr),
}

impl From<Corrupt> for Stop {
    fn from(c: Corrupt) -> Self {
        Stop::Corrupt(c)
    }
}

impl Decoder<'_> {
    fn batch(&mut self, batch: &[u8]) -> Result<(), Stop> {
        if batch.len() < wire::FRAMING + 14 {
            return Err(Corrupt(
                "Record size is less than the minimum record overhead (14)".into(),
            )
            .into());
        }
        if batch.len() < wire::HEADER {
            return Err(Corrupt("a batch shorter than its header".into()).into());
        }
        if self.check_crcs
            && wire::be_u32(batch, wire::CRC_AT) != crc32c::crc32c(&batch[wire::ATTRIBUTES_AT..])
        {
            return Err(Corrupt("Invalid CRC".into()).into());
        }
        let base_offset = wire::be_i64(batch, 0);
        let attributes = wire::be_i16(batch, 21);
        let last_offset_delta = wire::be_i32(batch, 23);
        let producer_id = wire::be_i64(batch, wire::PRODUCER_ID_AT);
        let count = wire::be_i32(batch, 57);
        let batch_next = base_offset + i64::from(last_offset_delta) + 1;
        let control = attributes & wire::CONTROL_MASK != 0;
        if self.read_committed {
            while self.aborted_at < self.aborted.len()
                && self.aborted[self.aborted_at].1 <= base_offset
            {
                self.aborting.insert(self.aborted[self.aborted_at].0);
                self.aborted_at += 1;
            }
            if control && self.abort_marker(batch, base_offset)? {
                self.aborting.remove(&producer_id);
            }
            if attributes & wire::TRANSACTIONAL_MASK != 0 && self.aborting.contains(&producer_id) {
                self.next_offset = batch_next;
                return Ok(());
            }
        }
        if control {
            self.next_offset = batch_next;
            return Ok(());
        }
        let info = BatchInfo {
            base_offset,
            first_timestamp: wire::be_i64(batch, 27),
            max_timestamp: wire::be_i64(batch, 35),
            log_append_time: attributes & wire::TIMESTAMP_TYPE_MASK != 0,
        };
        let codec = attributes & wire::CODEC_MASK;
        let base = self.set.data.len();
        if codec == 0 {
            self.set.data.extend_from_slice(&batch[wire::HEADER..]);
        } else {
            let payload = PyBytes::new(self.decompress.py(), &batch[wire::HEADER..]);
            let plain = self
                .decompress
                .call1((codec, payload))
                .map_err(Stop::Undecodable)?;
            let plain = plain
                .cast::<PyBytes>()
                .map_err(|e| Stop::Undecodable(PyErr::from(e)))?;
            self.set.data.extend_from_slice(plain.as_bytes());
        }
        let records = self.records(base, &info, count)?;
        for record in records {
            if record.offset < self.next_offset {
                continue; // before the position: the rest of a batch fetched from its middle
            }
            self.set.payload += (record.key.size() + record.value.size()) as u64;
            self.next_offset = record.offset + 1;
            self.set.records.push(record);
        }
        self.next_offset = batch_next;
        Ok(())
    }

    /// The batch's records, decoded from its (decompressed) bytes at `base` of the data.
    fn records(
        &mut self,
        base: usize,
        info: &BatchInfo,
        count: i32,
    ) -> Result<Vec<Record>, Corrupt> {
        let data = &self.set.data[base..];
        let mut pos = 0usize;
        let mut found = Vec::with_capacity(count.max(0) as usize);
        for _ in 0..count.max(0) {
            found.push(wire::read_record(
                data,
                &mut pos,
                base,
                info,
                &mut self.set.headers,
            )?);
        }
        if pos != data.len() {
            return Err(Corrupt(format!(
                "{} unconsumed bytes after all records consumed",
                data.len() - pos
            )));
        }
        Ok(found)
    }

    /// Whether a control batch is an abort marker (its first record's key: version 0, type 0).
    fn abort_marker(&self, batch: &[u8], base_offset: i64) -> Result<bool, Corrupt> {
        let info = BatchInfo {
            base_offset,
            first_timestamp: 0,
            max_timestamp: 0,
            log_append_time: false,
        };
        let mut pos = 0usize;
        let mut headers = Vec::new();
        let body = &batch[wire::HEADER..];
        if wire::be_i32(batch, 57) < 1 {
            return Err(Corrupt("Control batch did not contain any records".into()));
        }
        let record = wire::read_record(body, &mut pos, 0, &info, &mut headers)?;
        let key = record.key.get(body).unwrap_or(b"");
        if key.len() < 4 {
            return Err(Corrupt("a control record key shorter than 4 bytes".into()));
        }
        Ok(wire::be_i16(key, 0) == 0 && wire::be_i16(key, 2) == 0)
    }
}

/// Decode a partition's fetched bytes from `fetch_offset`; `None` when they hold a batch of
/// another format than v2 (the caller decodes them itself). A corrupt batch raises
/// `CorruptBatch` (the fetch is made again, as aiokafka does); a batch that cannot be
/// decompressed stops the records there (`stopped_at`, `error`).
#[pyfunction]
#[pyo3(signature = (raw, fetch_offset, aborted, read_committed, check_crcs, decompress))]
pub fn decode<'py>(
    py: Python<'py>,
    raw: &[u8],
    fetch_offset: i64,
    mut aborted: Vec<(i64, i64)>,
    read_committed: bool,
    check_crcs: bool,
    decompress: &Bound<'py, PyAny>,
) -> PyResult<Option<Decoded>> {
    aborted.sort_by_key(|&(_, first)| first);
    let mut frames = Vec::new();
    let mut pos = 0usize;
    while raw.len() - pos >= wire::FRAMING {
        let length = wire::be_i32(raw, pos + 8);
        let end = pos as i64 + wire::FRAMING as i64 + i64::from(length);
        if length < 0 || end > raw.len() as i64 {
            break; // a partial batch ends a fetch answer
        }
        let end = end as usize;
        if end - pos > wire::MAGIC_AT && raw[pos + wire::MAGIC_AT] != 2 {
            return Ok(None);
        }
        frames.push((pos, end));
        pos = end;
    }
    let mut decoder = Decoder {
        next_offset: fetch_offset,
        aborted,
        aborted_at: 0,
        aborting: HashSet::new(),
        read_committed,
        check_crcs,
        decompress,
        set: RecordSet {
            data: Vec::with_capacity(raw.len()),
            records: Vec::new(),
            headers: Vec::new(),
            payload: 0,
        },
    };
    let mut stopped: Option<(i64, PyErr)> = None;
    for (start, end) in frames {
        match decoder.batch(&raw[start..end]) {
            Ok(()) => {}
            Err(Stop::Corrupt(Corrupt(why))) => return Err(CorruptBatch::new_err(why)),
            Err(Stop::Undecodable(err)) => {
                stopped = Some((decoder.next_offset, err));
                break;
            }
        }
    }
    let next_offset = decoder.next_offset;
    let (stopped_at, error) = match stopped {
        Some((at, err)) => (Some(at), Some(err.into_value(py).into_any())),
        None => (None, None),
    };
    Ok(Some(Decoded {
        records: Py::new(py, decoder.set)?,
        next_offset,
        stopped_at,
        error,
    }))
}
