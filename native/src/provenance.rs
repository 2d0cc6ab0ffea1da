//! The loop rule and the provenance header, as `replicator/model/provenance.py` states them
//! (that module is the reference: the differential tests hold the two to the same answers).

use pyo3::prelude::*;

pub const ORIGIN: &[u8] = b"replicator";
pub const UPSTREAM: &[u8] = b"replicator-upstream";

/// What the loop rule makes of a record that carried provenance headers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mark {
    Derived = 0,
    Loop = 1,
    Malformed = 2,
}

/// The cluster and topic of a provenance value, if it is one
/// (`<cluster>/<topic>/<partition>/<offset>`, `VALUE_PATTERN` and its bounds).
pub fn origin(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = raw.split(|&b| b == b'/');
    let (cluster, topic, partition, offset) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let cluster_ok = !cluster.is_empty()
        && cluster
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let topic_ok = !topic.is_empty()
        && topic
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if !cluster_ok || !topic_ok {
        return None;
    }
    let partition = canonical(partition, 10)?;
    let offset = canonical(offset, 19)?;
    if partition > (1u64 << 31) - 1 || offset > (1u64 << 63) - 1 {
        return None;
    }
    Some((cluster, topic))
}

/// A canonical non-negative decimal of at most `digits` digits.
fn canonical(raw: &[u8], digits: usize) -> Option<u64> {
    if raw.is_empty() || raw.len() > digits || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if raw.len() > 1 && raw[0] == b'0' {
        return None;
    }
    raw.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Provenance for the records of one source partition (`provenance.Tagger`).
#[pyclass(frozen, module = "replicator._native")]
pub struct Tagger {
    pub prefix: Vec<u8>,
    topic: Vec<u8>,
    home: Option<Vec<u8>>,
    home_marks: Vec<Vec<u8>>,
}

#[pymethods]
impl Tagger {
    #[new]
    #[pyo3(signature = (prefix, topic, home, home_marks))]
    fn new(prefix: Vec<u8>, topic: &str, home: Option<&str>, home_marks: Vec<String>) -> Self {
        Tagger {
            prefix,
            topic: topic.as_bytes().to_vec(),
            home: home.map(|h| h.as_bytes().to_vec()),
            home_marks: home_marks.into_iter().map(String::into_bytes).collect(),
        }
    }
}

impl Tagger {
    /// The loop rule for a record whose headers name provenance (`provenance.marking`), given
    /// the values of its `replicator` headers.
    pub fn marking(&self, origins: &[Option<&[u8]>]) -> Mark {
        let [value] = origins else {
            return if origins.is_empty() {
                Mark::Derived
            } else {
                Mark::Malformed
            };
        };
        let Some((cluster, topic)) = value.and_then(origin) else {
            return Mark::Malformed;
        };
        let source = &self.topic[..];
        if topic == source {
            return Mark::Loop;
        }
        if let Some(home) = &self.home {
            if cluster == &home[..] && source.ends_with(topic) {
                let renamed_by = source[..source.len() - topic.len()].to_ascii_lowercase();
                let marked = |mark: &Vec<u8>| {
                    mark.is_empty() || renamed_by.windows(mark.len()).any(|w| w == &mark[..])
                };
                if self.home_marks.iter().any(marked) {
                    return Mark::Loop;
                }
            }
        }
        Mark::Derived
    }
}
