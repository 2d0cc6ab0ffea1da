"""The data path's pure model: what a record carries and how it is packed and committed.

``records``
    A source record as the data path reads it (:class:`~replicator.model.records.SourceRecord`).
``provenance``
    The one header naming where a replicated record came from, and the loop rule.
``batching``
    Destination batches: records tagged once, packed per destination (or placed by key).
``native``
    The native batch path (``replicator._native``, built from ``native/``): records kept as
    bytes from the fetch to the produce request; which data path the process runs.
``offsets``
    Which source offsets are safe to commit (contiguous acknowledgements) and the destination
    mark saved with them; where a position outside a partition's log goes.
``handover``
    Where a flow took a partition over from a MirrorMaker (its copies carry no provenance), as
    kept in the checkpoints topic for the translation of groups' positions.

No I/O and no clients: everything here is unit-tested without a broker. It imports nothing of the
product outside this package but its error tree (and the native extension).
"""
