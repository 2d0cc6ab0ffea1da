"""Start-up at scale: what starting hundreds of partitions costs in requests, and that every one
of them starts and replicates exactly.

Both clusters sit behind a counting proxy (the brokers advertise it, so every client connection
passes through it), which counts the requests the replicator sends by Kafka API. The same
replicator configuration is restarted over a small and a large layout (12 times the topics and
partitions); the requests start-up needs (metadata, topic creation and configs, log bounds,
committed offsets and marks) must not grow with the layout: batched, they take a handful per leg
and round whatever the number of partitions. Fetches are not counted (they depend on time).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from replicator.kafka.readers import StoredRecord, read_topics
from tests.integration.faults import FaultProxy, behind_proxy
from tests.integration.harness import (
    BACKEND,
    Broker,
    ReplicatorProcess,
    Start,
    _create_topics,
    oracle,
    produce,
    replicator_env,
    run,
    wait_until,
)

pytestmark = [
    pytest.mark.smoke,
    pytest.mark.skipif(
        BACKEND != "embedded",
        reason="the request counts are the embedded broker's (make smoke runs them there)",
    ),
]

# The Kafka APIs start-up sends once per partition when it is not batched.
STARTUP_APIS = {
    2: "ListOffsets",
    3: "Metadata",
    9: "OffsetFetch",
    19: "CreateTopics",
    32: "DescribeConfigs",
    37: "CreatePartitions",
}
# Rounds a start may need beyond the small layout's (a wave of partitions that starts a little
# later than the others makes one more round of each request): a constant, not a multiple.
ROUNDS_SLACK = 12


@contextmanager
def counted_clusters(*aliases: str) -> Iterator[tuple[dict[str, Broker], list[FaultProxy]]]:
    """One embedded broker per alias, each behind a request-counting proxy."""
    brokers: dict[str, Broker] = {}
    proxies: list[FaultProxy] = []
    try:
        for alias in aliases:
            brokers[alias], proxy = behind_proxy(alias)
            proxies.append(proxy)
        yield brokers, proxies
    finally:
        for broker in brokers.values():
            broker.stop()
        for proxy in proxies:
            proxy.stop()


def startup_requests(proxies: list[FaultProxy]) -> tuple[Counter[str], Counter[str]]:
    """Start-up requests by API, and by API and client (to tell which part sent them)."""
    total: Counter[str] = Counter()
    by_client: Counter[str] = Counter()
    for proxy in proxies:
        for (key, client), n in proxy.requests_by_client.items():
            if key in STARTUP_APIS and client.startswith("replicator-"):  # not the test's
                total[STARTUP_APIS[key]] += n
                by_client[f"{STARTUP_APIS[key]} {client}"] += n
    return total, by_client


def every_partition_started(replicator: ReplicatorProcess, partitions: int) -> bool:
    """Ready, and on both legs every partition assigned and none starting (the gauges)."""
    replicator.assert_running()
    try:
        if replicator.get("/readyz")[0] != 200:
            return False
    except OSError:
        return False  # not serving HTTP yet
    for leg in ("dc1->dc1", "dc1->dc2"):
        starting = replicator.metric("replicator_leg_partitions", leg=leg, state="starting")
        replicating = replicator.metric("replicator_leg_partitions", leg=leg, state="replicating")
        assert starting == 0, f"{leg}: ready with {starting:.0f} partitions still starting"
        if replicating != partitions:
            return False
    return True


def read_all(broker: Broker, topics: list[str]) -> dict[str, list[StoredRecord]]:
    return run(read_topics(broker.bootstrap_servers, topics, timeout=60))


def delivered_exactly(brokers: dict[str, Broker], sent: dict[str, list[StoredRecord]]) -> list[str]:
    """Per real topic and cluster, what differs from exactly the records sent (empty: exact)."""
    real = [topic.removesuffix("_REPLICA") for topic in sent]
    problems = []
    for broker in brokers.values():
        found = read_all(broker, real)
        for topic, records in sent.items():
            report = oracle(records, found[topic.removesuffix("_REPLICA")], "dc1")
            if report.missing or report.duplicates or report.out_of_order:
                problems.append(f"{broker.alias}/{topic}: {report}")
    return problems


def restart_cost(
    replicators: Start, topics: int, partitions: int
) -> tuple[Counter[str], Counter[str]]:
    """Replicate a layout, restart the replicator, count what the restart asks for until every
    partition started; check every record delivered exactly once on both clusters."""
    names = [f"t{i:03d}_REPLICA" for i in range(topics)]
    with counted_clusters("dc1", "dc2") as (brokers, proxies):
        local = brokers["dc1"]
        run(_create_topics(local.bootstrap_servers, dict.fromkeys(names, partitions), {}))
        sent = {name: produce(local, name, 2 * partitions, partitions) for name in names}
        env = replicator_env("dc1", brokers, metadata_max_age_ms="30000")
        everything = topics * partitions
        first = replicators("dc1", env)
        wait_until(
            lambda: every_partition_started(first, everything), 120, "first start", first.log
        )
        wait_until(lambda: not delivered_exactly(brokers, sent), 120, "first delivery", first.log)
        assert first.stop() == 0

        for proxy in proxies:
            proxy.requests.clear()
            proxy.requests_by_client.clear()
        again = replicators("dc1", env)
        wait_until(lambda: every_partition_started(again, everything), 120, "restart", again.log)
        cost = startup_requests(proxies)
        more = {name: produce(local, name, partitions, partitions, tag="-after") for name in names}
        both = {name: sent[name] + more[name] for name in names}
        wait_until(lambda: not delivered_exactly(brokers, both), 120, "delivery", again.log)
        assert delivered_exactly(brokers, both) == []
        skipped = again.metric("replicator_resume_skipped_records_total")
        assert skipped == 0, "nothing was acknowledged after the last commit before a clean stop"
        return cost


def test_restart_requests_do_not_grow_with_partitions(replicators: Start) -> None:
    small, small_clients = restart_cost(replicators, topics=4, partitions=4)  # 16 partitions
    large, large_clients = restart_cost(replicators, topics=48, partitions=4)  # 192 partitions
    print(f"start-up requests, 16 partitions: {dict(small)}; 192 partitions: {dict(large)}")
    grew = {
        api: (small[api], large[api])
        for api in STARTUP_APIS.values()
        if large[api] > small[api] + ROUNDS_SLACK
    }
    assert not grew, (
        f"start-up requests grew with the partitions (16 -> 192): {grew}; by client: "
        f"{dict(small_clients)} -> {dict(large_clients)}"
    )
