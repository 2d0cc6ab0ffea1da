//! `replicator._native`: the native batch path. A partition's fetched record set is decoded into
//! spans over its bytes (`fetch`), and every destination's batches are built from them
//! (`build`) with the loop rule of `provenance`: no record becomes a Python object. The
//! pure-Python path (`replicator/model/batching.py`, aiokafka's decoder) is the reference; the
//! differential tests hold the two to the same bytes.

use pyo3::prelude::*;

mod build;
mod fetch;
mod provenance;
mod wire;

/// The interface version `replicator.model.native` expects (an older build is not used).
const INTERFACE: u32 = 1;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("INTERFACE", INTERFACE)?;
    m.add("CorruptBatch", m.py().get_type::<fetch::CorruptBatch>())?;
    m.add_class::<fetch::RecordSet>()?;
    m.add_class::<fetch::Decoded>()?;
    m.add_class::<build::NativeBatch>()?;
    m.add_class::<provenance::Tagger>()?;
    m.add_function(wrap_pyfunction!(fetch::decode, m)?)?;
    m.add_function(wrap_pyfunction!(build::build, m)?)?;
    m.add_function(wrap_pyfunction!(build::build_placed, m)?)?;
    m.add_function(wrap_pyfunction!(build::place, m)?)?;
    Ok(())
}
