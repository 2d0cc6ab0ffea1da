"""Replicator: an active-active Kafka replication sidecar.

Consumes every ``<topic>_REPLICA`` topic of the local cluster and writes each record to ``<topic>``
on the local cluster and on every remote cluster, tagged with provenance headers so that no record
is ever mirrored twice.
"""

__version__ = "0.1.0"
