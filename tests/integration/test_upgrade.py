"""Rolling upgrade and rollback under load: the procedure of ``docs/operations/upgrading.md``.

Two replicas of dc1 share 2 topics x 6 partitions while records stream into them. They start as
the *previous build* (the ``replicator`` package of :data:`PREVIOUS_BUILD`, taken from this
repository's history), are replaced one at a time by this build (the upgrade), then one at a time
by the previous build again (the rollback): each replica stopped with SIGTERM only once its
successor shares the partitions, as a Deployment with ``maxSurge: 1, maxUnavailable: 0`` does.
Every record ends up in both clusters' real topics exactly once and in order (:func:`oracle`),
with nothing counted as a possible duplicate: both builds read and write the same compatibility
surface (the provenance header, the consumer groups, the destination marks).
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack
from io import BytesIO
from pathlib import Path

import pytest

from tests.integration.harness import (
    ReplicatorProcess,
    Start,
    Stream,
    count,
    create_topics,
    holds,
    holds_distinct,
    oracle,
    read,
    replicator_env,
    share_partitions,
    start_clusters,
    wait_until,
)

PREVIOUS_BUILD = "097ad83aae86d09171710b027fa4d01d96259caf"
"""The last build before the ACL work (issue 41) changed how partitions start and resume."""
TOPICS = ("orders", "payments")
PARTITIONS = 6
ALL_PARTITIONS = len(TOPICS) * PARTITIONS
REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def previous_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The previous build's ``replicator`` package, exported from git into a directory."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPOSITORY), "archive", PREVIOUS_BUILD, "replicator"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the previous build {PREVIOUS_BUILD[:7]} is not in this checkout: {exc}")
    root = tmp_path_factory.mktemp("previous-build")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    yield root


def replace(
    start: Start,
    env: dict[str, str],
    running: list[ReplicatorProcess],
    index: int,
    source: Path | None,
    what: str,
) -> float:
    """Start the successor of ``running[index]``, wait until the replicas share every partition
    with it among them, stop the old one (SIGTERM), and wait until the two left share them.
    Returns the seconds from the SIGTERM until they did."""
    successor = start("dc1", env, source=source)
    successor.wait_ready(90)
    both = share_partitions([*running, successor], ALL_PARTITIONS)
    wait_until(lambda: both() is not None, 90, f"{what}: the successor sharing", successor.log)
    old = running[index]
    possible = old.metric("replicator_duplicates_possible_total")
    assert possible == 0, f"{what}: {possible} records counted as possibly written twice"
    assert old.stop() == 0, f"{what}: the old replica's stop"
    running[index] = successor
    left = share_partitions(running, ALL_PARTITIONS)
    return wait_until(lambda: left() is not None, 90, f"{what}: the two sharing", successor.log)


def test_a_rolling_upgrade_and_rollback_under_load_lose_and_repeat_nothing(
    replicators: Start, previous_build: Path
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=PARTITIONS, payments_REPLICA=PARTITIONS)
        env = replicator_env("dc1", brokers, shutdown_grace_ms="20000")
        running = [replicators("dc1", env, source=previous_build) for _ in range(2)]
        for replica in running:
            replica.wait_ready(90)
        streams = [Stream(local, f"{topic}_REPLICA", PARTITIONS, per_tick=12) for topic in TOPICS]
        took: list[str] = []
        with ExitStack() as streaming:
            for stream in streams:
                streaming.enter_context(stream)
            for topic in TOPICS:
                wait_until(holds(brokers["dc2"], topic, 1), 60, f"{topic} flowing", running[0].log)
            for build, source in (("upgrade", None), ("rollback", previous_build)):
                for index in range(2):
                    what = f"{build}, replica {index + 1}"
                    seconds = replace(replicators, env, running, index, source, what)
                    took.append(f"{what}: {seconds:.1f} s")
        assert not [s.errors for s in streams if s.errors]

        expected = {topic: count(local, f"{topic}_REPLICA") for topic in TOPICS}
        for broker in brokers.values():
            for topic in TOPICS:
                wait_until(
                    holds_distinct(broker, topic, expected[topic]),
                    90,
                    f"{topic} complete on {broker.alias}",
                    running[0].log,
                )
        possible = sum(r.metric("replicator_duplicates_possible_total") for r in running)
        assert possible == 0
        for topic in TOPICS:
            records = read(local, f"{topic}_REPLICA")
            for broker in brokers.values():
                report = oracle(records, read(broker, topic), "dc1")
                assert not report.missing, f"{topic} on {broker.alias}: {report}"
                assert not report.duplicates, f"{topic} on {broker.alias}: {report}"
                assert not report.out_of_order, f"{topic} on {broker.alias}: {report}"
                assert count(broker, topic) == expected[topic]
        print(
            f"rolling upgrade {PREVIOUS_BUILD[:7]} -> this build -> {PREVIOUS_BUILD[:7]} under "
            f"load: {sum(expected.values())} records, each once on both clusters; {took}"
        )
        for replica in running:
            assert replica.stop() == 0
