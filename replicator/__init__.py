"""Replicator: an active-active Kafka replication sidecar.

Consumes every ``<topic>_REPLICA`` topic of the local cluster and writes each record to ``<topic>``
on the local cluster and on every remote cluster, tagged with provenance headers so that no record
is ever mirrored twice.

The package map, lowest layer first (a package imports only from those above it in this list;
import-linter's layers contract in pyproject.toml enforces it, ``lint-imports``):

``clock``
    The clocks every duration is read on (the event loop's, fake in the unit tests).
``errors``, ``lifecycle``
    The one error tree; stopping, closing and waiting in long-lived tasks.
``config``
    Settings (the only reader of the environment) and the topology they describe.
``telemetry``
    Metrics and logs.
``model``
    The pure model of the data path: records, provenance, batching, offsets.
``kafka``
    The Kafka boundary: clients, error translation, retry, the producer, record decoding.
``topics``
    Destination topics provisioned, source topics watched, offset snapshots.
``replication``
    The data path: feeds, legs, partitions, senders, resume, commits, health, heartbeats.
``failover``
    Consumer-group positions across clusters: translation, checkpoints, group sync, the plan.
``service``
    The running process: the root TaskGroup and the HTTP endpoints.
``mirrormaker``
    MirrorMaker 1, Go mirror maker and MirrorMaker 2 configurations, translated.
``devtools``
    Embedded brokers, Apache Kafka as local JVMs, the demo, the sandbox.
``spark``
    The bulk jobs (backfill, audit) on Spark.
``cli``
    The command line, and the reference pages of the docs generated from the code.
"""

__version__ = "0.1.0"
