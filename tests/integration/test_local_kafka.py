"""The local Apache Kafka the suite, the benchmarks and the sandbox start (devtools).

Ports are chosen free and bind-tested, but another process (the other test worker, a
MirrorMaker JVM) may take one before the broker binds it: measured once in CI, where a broker
died with ``Address already in use`` on its controller port and failed a test that had nothing
to do with it. A cluster's first start then picks new ports.
"""

from __future__ import annotations

import socket

import pytest

from replicator.devtools.apache_kafka import ApacheKafkaCluster, start_all
from tests.integration.harness import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "kafka", reason="Apache Kafka's own JVMs")


def test_a_port_taken_before_the_broker_binds_it_is_chosen_again() -> None:
    cluster = ApacheKafkaCluster("taken")
    node = cluster.nodes[0]
    taken = node.controller_port
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", taken))
    holder.listen()
    try:
        start_all([cluster])
        assert cluster.nodes[0].controller_port != taken
        assert "Kafka Server started" in cluster.log()
    finally:
        holder.close()
        cluster.remove()
