"""The supported matrix's other Apache Kafka releases (``OTHER_KAFKA_VERSIONS``: the oldest 4.0
and the newest release; the whole suite runs on the pinned ``KAFKA_VERSION``).

Per release, two clusters of it: the ``_REPLICA`` mode copies 3 partitions to both, a replicator
stopped and started again (the destination marks, the tail reads, the group's committed offsets)
and a topic created while it runs; every record is on both clusters once, in order, record by
record (:func:`oracle`), and the producer got an idempotent producer id from each broker.
"""

from __future__ import annotations

import pytest

from replicator.devtools.apache_kafka import OTHER_KAFKA_VERSIONS
from tests.integration.harness import (
    Start,
    count,
    create_topics,
    holds,
    oracle,
    produce,
    read,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)


@pytest.mark.parametrize("version", OTHER_KAFKA_VERSIONS)
def test_the_replica_mode_is_exact_on_another_kafka_release(
    replicators: Start, version: str
) -> None:
    with start_clusters("dc1", "dc2", version=version) as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=3)
        env = replicator_env("dc1", brokers)
        produce(local, "orders_REPLICA", 300, 3)
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 300), 60, f"{broker.alias} on {version}", dc1.log)
        assert dc1.stop() == 0
        produce(local, "orders_REPLICA", 150, 3, tag="-after")
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        create_topics(local, payments_REPLICA=2)
        produce(local, "payments_REPLICA", 40, 2)
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 450), 60, f"{broker.alias} on {version}", dc1.log)
            wait_until(holds(broker, "payments", 40), 90, f"payments on {version}", dc1.log)
        wait_settled(dc1)
        for topic, records in (("orders", 450), ("payments", 40)):
            source = read(local, f"{topic}_REPLICA")
            for broker in brokers.values():
                report = oracle(source, read(broker, topic), "dc1")
                assert not report.missing and not report.duplicates, f"{version}: {report}"
                assert not report.out_of_order, f"{version} {broker.alias}: {report}"
                assert count(broker, topic) == records
        _, status = dc1.get("/status")
        granted = {leg["leg"]: leg["idempotent_producer"] for leg in status["legs"]}
        assert granted == {"dc1->dc1": True, "dc1->dc2": True}, granted
        assert dc1.stop() == 0
