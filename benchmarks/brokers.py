"""The local clusters every benchmark runs on: Apache Kafka by default, the embedded broker on
request, and the name each figure is printed with.

    .venv/bin/python -m benchmarks.run --broker embedded     # the demo's broker instead
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from replicator.devtools.apache_kafka import BROKERS, KAFKA_VERSION, local_clusters
from replicator.devtools.embedded import LocalBroker

# Chosen once per run by --broker (add_broker_option); Apache Kafka unless told otherwise.
_chosen = {"broker": "kafka"}
# A broker's heap for the benchmarks: room for a million records in its caches.
HEAP_MB = 1024


def add_broker_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default="kafka",
        help=f"the local clusters: Apache Kafka {KAFKA_VERSION} (default) or the embedded broker",
    )


def choose(args: argparse.Namespace) -> None:
    """Take the ``--broker`` of parsed arguments for every cluster this run starts."""
    _chosen["broker"] = args.broker


def broker_name() -> str:
    """What the figures were measured on, printed with them."""
    if _chosen["broker"] == "kafka":
        return f"Apache Kafka {KAFKA_VERSION} (one KRaft node per cluster, {HEAP_MB} MB heap)"
    return "the embedded broker (Tansu, in memory)"


def lists_offsets() -> bool:
    """Whether the chosen broker answers ListOffsets(latest) truly, so log ends are asked in
    one request per broker; the embedded broker's answer is wrong after multi-record batches,
    so there they are read from fetch responses instead."""
    return _chosen["broker"] == "kafka"


@contextmanager
def clusters(*aliases: str, wan: bool = False) -> Iterator[dict[str, LocalBroker]]:
    """One fresh single-node cluster per alias of the chosen broker, each with a WAN listener
    if asked (Apache Kafka only); removed on exit."""
    with local_clusters(*aliases, broker=_chosen["broker"], heap_mb=HEAP_MB, wan=wan) as started:
        yield started
