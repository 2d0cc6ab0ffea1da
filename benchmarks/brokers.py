"""The local clusters every benchmark runs on: Apache Kafka by default, the embedded broker on
request, where Apache Kafka keeps its logs, and the name each figure is printed with.

    .venv/bin/python -m benchmarks.run --broker embedded         # the demo's broker instead
    .venv/bin/python -m benchmarks.scale --broker-storage memory  # logs on tmpfs

Where the logs live matters on a machine whose disk is slow to allocate: Apache Kafka writes its
offset and time indexes through memory-mapped files created sparse, so the first entry written
into each new 4 KiB page of an index (one per ``index.interval.bytes``, 4 KiB of records, per
partition) waits for the file system to allocate that page. Measured on this project's 2-core
machine (ext4 on a virtual disk): 40-60 ms per page, in the broker's request handler
(``OffsetIndex.append``, ``TimeIndex.maybeAppend`` in a thread dump), so a produce request
holding the batches that take 100 partitions past their first 4 KiB together is answered after
4-5 s. That is the disk, not the contender: ``--broker-storage memory`` puts the brokers'
directories on tmpfs (``/dev/shm``) so that a comparison of contenders measures them.
"""

from __future__ import annotations

import argparse
import math
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from replicator.devtools.apache_kafka import BROKERS, KAFKA_VERSION, local_clusters
from replicator.devtools.embedded import LocalBroker

# Chosen once per run by --broker and --broker-storage (add_broker_option); Apache Kafka with
# its logs on disk unless told otherwise.
_chosen = {"broker": "kafka", "storage": "disk"}
# A broker's heap for the benchmarks: room for a million records in its caches.
HEAP_MB = 1024
STORAGES = ("disk", "memory")
# Partitions one Apache Kafka node is given at most. A node holds a file open for each
# partition's active segment (its indexes are mapped, not held open) beside its sockets, and a
# process here may open 20,000 files at most (``ulimit -Hn``; it cannot be raised): 20,004
# partitions (the 10,002 partitions of 10,000 in topics of 6, twice: ``_REPLICA`` and real) made
# a single node fail ("Too many open files"). Three quarters of the hard limit (the JVM raises
# its own to it) leaves room; no limit: 100,000.
_OPEN_FILES = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
PARTITIONS_PER_NODE = 100_000 if _OPEN_FILES == resource.RLIM_INFINITY else _OPEN_FILES * 3 // 4
MEMORY = Path("/dev/shm")  # tmpfs on Linux


def add_broker_option(parser: argparse.ArgumentParser, storage: str = "disk") -> None:
    """``--broker`` and ``--broker-storage`` (default ``storage``) on ``parser``."""
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default="kafka",
        help=f"the local clusters: Apache Kafka {KAFKA_VERSION} (default) or the embedded broker",
    )
    parser.add_argument(
        "--broker-storage",
        choices=STORAGES,
        default=storage,
        help="where Apache Kafka keeps its logs: the temporary directory (disk) or tmpfs "
        f"({MEMORY}: memory), which keeps a slow disk's page allocation out of the figures "
        f"(default: {storage})",
    )


def choose(args: argparse.Namespace) -> None:
    """Take ``--broker`` and ``--broker-storage`` of parsed arguments for every cluster this
    run starts; ``memory`` on a machine without tmpfs at :data:`MEMORY` is refused."""
    storage = getattr(args, "broker_storage", "disk")
    if storage == "memory" and not MEMORY.is_dir():
        raise SystemExit(f"--broker-storage memory: no tmpfs at {MEMORY}")
    _chosen["broker"] = args.broker
    _chosen["storage"] = storage


def broker_name() -> str:
    """What the figures were measured on, printed with them."""
    if _chosen["broker"] == "kafka":
        logs = "logs in memory (tmpfs)" if _chosen["storage"] == "memory" else "logs on disk"
        return (
            f"Apache Kafka {KAFKA_VERSION} (KRaft nodes of {HEAP_MB} MB heap: one per cluster, "
            f"more where a cluster holds over {PARTITIONS_PER_NODE:,} partitions; {logs})"
        )
    return "the embedded broker (Tansu, in memory)"


def lists_offsets() -> bool:
    """Whether the chosen broker answers ListOffsets(latest) truly, so log ends are asked in
    one request per broker; the embedded broker's answer is wrong after multi-record batches,
    so there they are read from fetch responses instead."""
    return _chosen["broker"] == "kafka"


def nodes_for(partitions: int) -> int:
    """Apache Kafka nodes for a cluster holding ``partitions``: one unless one JVM would hold
    more partitions than :data:`PARTITIONS_PER_NODE` (the embedded broker: always one)."""
    if _chosen["broker"] != "kafka":
        return 1
    return max(1, math.ceil(partitions / PARTITIONS_PER_NODE))


@contextmanager
def clusters(
    *aliases: str, wan: bool = False, partitions: int = 0
) -> Iterator[dict[str, LocalBroker]]:
    """One fresh cluster per alias of the chosen broker, each with a WAN listener if asked
    (Apache Kafka only), its logs where chosen, and as many nodes as holding ``partitions``
    (the most any of them will hold) takes (:func:`nodes_for`); removed on exit."""
    storage = MEMORY if _chosen["storage"] == "memory" else None
    with local_clusters(
        *aliases,
        broker=_chosen["broker"],
        heap_mb=HEAP_MB,
        wan=wan,
        storage=storage,
        nodes=nodes_for(partitions),
    ) as started:
        yield started
