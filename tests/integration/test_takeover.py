"""Taking over from a running MirrorMaker, with a stream running through the switch.

MirrorMaker 2 (dedicated mode) or MirrorMaker 1 copies a topic while producers keep writing; it
is stopped (or killed), and the replicator starts on the same file (``replicator mm2``) or the
same command line (``replicator mirror-maker``). The oracle is every source record, by content:
the target must hold each exactly once, in its source partition's order, whichever tool copied
it. MirrorMaker's copies carry no provenance, so they are told apart by nothing else. The way
back (MirrorMaker again after the replicator) is covered where it needs nothing of the
replicator: MirrorMaker 1 resumes from its own group, which the replicator does not move.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import GroupCoordinatorNotAvailableError

from replicator.devtools.mirror_makers import (
    mm2_test_properties,
    properties_text,
    start_mm1,
    start_mm2,
)
from replicator.kafka.readers import StoredRecord
from tests.integration.harness import (
    APACHE_KAFKA,
    Broker,
    ReplicatorProcess,
    Start,
    Stream,
    admin_client,
    commit_offsets,
    count,
    create_topics,
    holds,
    produce,
    read,
    replicator_cli,
    run,
    start_clusters,
    wait_until,
)
from tests.integration.test_mm2_contract import committed, remote_consumer_offsets

pytestmark = pytest.mark.skipif(
    not APACHE_KAFKA, reason="MirrorMaker runs against Apache Kafka only"
)

PARTITIONS = 3
ENV = {"REPLICATOR_LOG_FORMAT": "json", "REPLICATOR_COMMIT_INTERVAL_MS": "200"}


def by_partition(records: list[StoredRecord]) -> dict[int, list[bytes | None]]:
    found: dict[int, list[bytes | None]] = defaultdict(list)
    for record in records:
        found[record.partition].append(record.value)
    return dict(found)


def assert_copied_exactly_once_in_order(
    source: list[StoredRecord], target: list[StoredRecord], same_partitions: bool
) -> None:
    """Every source record once in the target (by value: each is unique), none other; in each
    source partition's order, in the same partition (``same_partitions``), or by key."""
    sent, copied = Counter(r.value for r in source), Counter(r.value for r in target)
    missing = [v for v in sent if v not in copied]
    repeated = {v: n for v, n in copied.items() if n > 1}
    foreign = [v for v in copied if v not in sent]
    assert not missing and not repeated and not foreign, (
        f"{len(missing)} missing (first {missing[:3]}), {len(repeated)} copied twice "
        f"(first {list(repeated)[:3]}), {len(foreign)} not from the source"
    )
    if same_partitions:
        assert by_partition(target) == by_partition(source)
        return
    # Placed by key, by MirrorMaker 1 then in the partition it had by the replicator: within
    # each target partition, each source partition's records of a key come in source order.
    where = {r.value: (r.partition, r.offset) for r in source}
    last: dict[tuple[int, int, bytes | None], int] = {}
    for record in target:
        partition, offset = where[record.value]
        run_key = (record.partition, partition, record.key)
        assert offset > last.get(run_key, -1), f"out of order: {record}"
        last[run_key] = offset


def group_state(broker: Broker, group: str) -> tuple[str, int]:
    """``group``'s state and member count (``("", 0)`` while its coordinator is not there)."""

    async def described() -> tuple[str, int]:
        admin = await admin_client(broker.bootstrap_servers)
        try:
            (found,) = await admin.describe_consumer_groups([group])
        except GroupCoordinatorNotAvailableError:  # the offsets topic is still being created
            return "", 0
        finally:
            await admin.close()
        _, _, state, _, _, members = found.groups[0][:6]  # error, group, state, type, protocol
        return state, len(members)

    return run(described())


def group_has_members(broker: Broker, group: str) -> bool:
    """Whether ``group`` has members (a tool that left, or whose session expired, has none)."""
    return group_state(broker, group)[1] > 0


def group_assigned(broker: Broker, group: str) -> bool:
    """Whether ``group`` is stable with a member holding partitions."""
    state, members = group_state(broker, group)
    return state == "Stable" and members > 0


def taken_over(node: ReplicatorProcess, predecessor: str) -> dict[str, int]:
    """The partitions the node's one leg took over, by where they started, as ``/status`` shows
    them; the same counts in ``replicator_partitions_taken_over_total``."""
    _, status = node.get("/status")
    (takeover,) = [leg["takeover"] for leg in status["legs"] if leg["takeover"]]
    assert takeover["from"].startswith(predecessor), takeover
    where: dict[str, int] = takeover["partitions"]
    for outcome, partitions in where.items():
        metric = node.metric("replicator_partitions_taken_over_total", outcome=outcome)
        assert metric == partitions, (outcome, metric, where)
    return where


def mm2_file(tmp_path: Path, primary: Broker, backup: Broker, groups: str | None = None) -> Path:
    """One way, primary -> backup, ``orders`` only, with Kafka's MM2 test settings; with
    ``groups``, their checkpoints and synced offsets too (every second)."""
    properties = mm2_test_properties(
        {"primary": primary.bootstrap_servers, "backup": backup.bootstrap_servers}
    )
    properties.update(
        {
            "primary->backup.enabled": "true",
            "primary->backup.topics": "orders",
            "backup->primary.enabled": "false",
            "emit.checkpoints.enabled": str(groups is not None).lower(),
            "sync.group.offsets.enabled": str(groups is not None).lower(),
        }
    )
    if groups is not None:
        properties["groups"] = groups
    config = tmp_path / "connect-mirror-maker.properties"
    config.write_text(properties_text(properties))
    return config


def mm1_files(tmp_path: Path, primary: Broker, backup: Broker) -> tuple[Path, Path]:
    """MirrorMaker 1's ``consumer.properties`` (group ``mm1-orders``, on primary) and
    ``producer.properties`` (to backup)."""
    consumer = tmp_path / "consumer.properties"
    # earliest: with its consumer's default (latest), MM1 resolves a partition's position only
    # at its first fetch, after joining, and misses what the stream wrote before.
    consumer.write_text(
        f"bootstrap.servers={primary.bootstrap_servers}\ngroup.id=mm1-orders\n"
        "auto.offset.reset=earliest\n"
    )
    producer = tmp_path / "producer.properties"
    producer.write_text(f"bootstrap.servers={backup.bootstrap_servers}\n")
    return consumer, producer


def copying_on(backup: Broker, topic: str, more: int, log: Callable[[], str]) -> None:
    """Wait for ``more`` records beyond what ``topic`` holds now."""
    now = count(backup, topic)
    wait_until(lambda: count(backup, topic) >= now + more, 120, f"{more} more copied", log)


def all_copied(primary: Broker, backup: Broker, target: str, log: Callable[[], str]) -> None:
    """Once the stream stopped: ``target`` holds each of ``orders``'s records once, in order."""
    source = read(primary, "orders")
    with contextlib.suppress(AssertionError):  # the comparison below says what is missing
        wait_until(lambda: count(backup, target) >= len(source), 60, "all copied")
    try:
        assert_copied_exactly_once_in_order(source, read(backup, target), target != "orders")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log()}") from None


def test_mirrormaker_2_to_the_replicator_and_back_and_again_under_a_stream(
    replicators: Start, tmp_path: Path
) -> None:
    """MM2 copies under a stream and is stopped (its Connect offsets saved); ``replicator mm2``
    on the same file takes over; it is stopped and ``replicator hand-back`` gives its positions
    to MM2, which resumes and is killed (its copies may run past the positions it saved); the
    replicator takes over again. Nothing copied twice, nothing skipped, at any switch."""
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_topics(primary, orders=PARTITIONS)
        config = mm2_file(tmp_path, primary, backup)
        remote = "primary.orders"
        with Stream(primary, "orders", PARTITIONS, per_tick=20) as stream:
            mm2 = start_mm2(config, tmp_path / "mm2")
            copying_on(backup, remote, 200, mm2.log)
            assert mm2.stop() in (0, 130, 143), mm2.log()
            node: ReplicatorProcess = replicators("backup", ENV, ("mm2", str(config)))
            copying_on(backup, remote, 200, node.log)
            assert "took over from MirrorMaker 2" in node.log()
            where = taken_over(node, "MirrorMaker 2")
            # Stopped cleanly: every partition of orders at the position MM2 saved, which its
            # last copy confirms (heartbeats too, if MM2 had copied one by then).
            assert where["by_start_from"] == 0, where
            assert where["confirmed_by_the_target"] >= PARTITIONS, where
            assert node.stop() == 0
            # The way back: the flow's positions into MM2's offsets topic, then MM2 again.
            dry, out, err = replicator_cli({}, "hand-back", "--mm2", str(config), "--json")
            assert dry == 0, err
            # Every partition of orders (heartbeats too: MM2 copies them whatever the filter).
            rows = [r for r in json.loads(out) if r["topic"] == "orders"]
            assert len(rows) == PARTITIONS and all(r["flow_position"] for r in rows), rows
            status, out, err = replicator_cli(
                {}, "hand-back", "--mm2", str(config), "--execute", "--json"
            )
            assert status == 0, err
            mm2 = start_mm2(config, tmp_path / "mm2-again")
            copying_on(backup, remote, 200, mm2.log)
            mm2.kill()  # not stopped: its copies may run past the positions it saved
            node = replicators("backup", ENV, ("mm2", str(config)))
            copying_on(backup, remote, 200, node.log)
        assert not stream.errors, stream.errors
        all_copied(primary, backup, remote, node.log)
        assert node.stop() == 0


def test_replicator_takes_over_from_a_killed_mirrormaker_2_that_saved_no_position(
    replicators: Start, tmp_path: Path
) -> None:
    """MM2 is killed within its first seconds, before it saved any position: the target's own
    copies (found in the source by their timestamp and content) say where it got to."""
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_topics(primary, orders=PARTITIONS)
        config = mm2_file(tmp_path, primary, backup)
        config.write_text(
            config.read_text().replace(
                "offset.flush.interval.ms = 1000", "offset.flush.interval.ms = 600000"
            )
        )
        with Stream(primary, "orders", PARTITIONS, per_tick=20) as stream:
            mm2 = start_mm2(config, tmp_path / "mm2")
            copying_on(backup, "primary.orders", 200, mm2.log)
            mm2.kill()
            node = replicators("backup", ENV, ("mm2", str(config)))
            copying_on(backup, "primary.orders", 200, node.log)
        assert not stream.errors, stream.errors
        all_copied(primary, backup, "primary.orders", node.log)
        assert "found_by_the_target_only" in node.log()
        where = taken_over(node, "MirrorMaker 2")
        assert where["at_its_saved_position"] == 0, where  # it saved none
        # Killed early, MM2 may not have copied into every partition: those start by START_FROM
        # (the stream's oracle above proves nothing was lost or copied twice either way).
        assert where["confirmed_by_the_target"] >= 1, where
        assert node.stop() == 0


def test_mirrormaker_1_to_the_replicator_and_back_and_again_under_a_stream(
    replicators: Start, tmp_path: Path
) -> None:
    """MM1 copies under a stream and is stopped; ``replicator mirror-maker`` on the same
    command line starts at the offsets MM1 committed under its group (the records written
    between the stop and the start are copied, none twice); ``replicator hand-back`` commits
    the flow's positions under MM1's group, MM1 resumes from them, and the replicator takes
    over again."""
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_topics(primary, orders=PARTITIONS)
        create_topics(backup, orders=PARTITIONS)  # MM1 creates no topics
        consumer, producer = mm1_files(tmp_path, primary, backup)
        args = ["--include", "orders", "--offset.commit.interval.ms", "1000"]
        line = ["--consumer.config", str(consumer), "--producer.config", str(producer), *args]
        mm1 = start_mm1([consumer], producer, args, tmp_path / "mm1")
        wait_until(lambda: group_assigned(primary, "mm1-orders"), 120, "MM1 joined", mm1.log)
        with Stream(primary, "orders", PARTITIONS, per_tick=20) as stream:
            copying_on(backup, "orders", 200, mm1.log)
            assert mm1.stop() in (0, 130, 143), mm1.log()
            wait_until(lambda: not group_has_members(primary, "mm1-orders"), 60, "MM1 left")
            node = replicators("backup", ENV, ("mirror-maker", *line))
            copying_on(backup, "orders", 200, node.log)
            assert "took over from MirrorMaker 1" in node.log()
            where = taken_over(node, "MirrorMaker 1")
            # MM1 keeps no partition numbers to confirm: the offsets its group committed.
            assert where == {
                "confirmed_by_the_target": 0,
                "at_its_saved_position": PARTITIONS,
                "by_start_from": 0,
            }, where
            assert node.stop() == 0
            quoted = " ".join(line)
            status, _, err = replicator_cli({}, "hand-back", "--mirror-maker", quoted, "--execute")
            assert status == 0, err
            mm1 = start_mm1([consumer], producer, args, tmp_path / "mm1-again")
            copying_on(backup, "orders", 200, mm1.log)
            assert mm1.stop() in (0, 130, 143), mm1.log()
            wait_until(lambda: not group_has_members(primary, "mm1-orders"), 60, "MM1 left")
            node = replicators("backup", ENV, ("mirror-maker", *line))
            copying_on(backup, "orders", 200, node.log)
        assert not stream.errors, stream.errors
        all_copied(primary, backup, "orders", node.log)
        assert node.stop() == 0


def test_mirrormaker_2s_checkpoints_and_synced_offsets_stay_valid_across_the_switch(
    replicators: Start, tmp_path: Path
) -> None:
    """A group of primary is checkpointed and its offsets synced to backup by MM2, then by
    ``replicator mm2`` on the same file. MM2's copies carry no provenance: a group still among
    them keeps MM2's checkpoint and synced offsets (valid: at most its position); once past the
    handover, the replicator's checkpoints put it exactly at its next record, MM2's copies
    counted as read, and sync its offsets there."""
    per_partition = 100
    keys = {("primary.orders", p) for p in range(PARTITIONS)}

    def group_at(position: int) -> None:
        offsets = {TopicPartition("orders", p): position for p in range(PARTITIONS)}
        commit_offsets(primary, "app", offsets)

    def checkpointed() -> dict[tuple[str, int], int]:
        return remote_consumer_offsets(backup, "primary", "app", monotonic=False)

    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_topics(primary, orders=PARTITIONS)
        produce(primary, "orders", per_partition * PARTITIONS, PARTITIONS, tag="-mm2")
        group_at(40)
        config = mm2_file(tmp_path, primary, backup, groups="app")
        mm2 = start_mm2(config, tmp_path / "mm2")
        copied = per_partition * PARTITIONS
        wait_until(holds(backup, "primary.orders", copied), 120, "MM2 copied", mm2.log)
        wait_until(lambda: checkpointed().keys() == keys, 60, "MM2's checkpoints", mm2.log)
        wait_until(lambda: synced(backup).keys() == keys, 60, "MM2 synced", mm2.log)
        # MM2 started at offset 0 and copied every record once: the exact position on backup
        # is the position on primary. MM2 translates from sparse offset syncs: at most that.
        assert mm2.stop() in (0, 130, 143), mm2.log()
        theirs, theirs_synced = checkpointed(), synced(backup)
        assert all(theirs[key] <= 40 for key in keys), theirs

        produce(primary, "orders", per_partition * PARTITIONS, PARTITIONS, tag="-replicator")
        node = replicators("backup", ENV, ("mm2", str(config)))
        wait_until(holds(backup, "primary.orders", 2 * copied), 120, "copied on", node.log)
        group_at(70)  # among MM2's copies: the replicator leaves MM2's translation standing
        wait_until(
            lambda: behind_takeover(node) == PARTITIONS, 60, "the group seen behind", node.log
        )
        assert checkpointed() == theirs and synced(backup) == theirs_synced
        group_at(150)  # among the replicator's copies: exact, MM2's counted as read
        exact = dict.fromkeys(keys, 150)
        wait_until(lambda: checkpointed() == exact, 60, "checkpointed at 150", node.log)
        wait_until(lambda: synced(backup) == exact, 60, "synced at 150", node.log)
        assert node.stop() == 0


def behind_takeover(node: ReplicatorProcess) -> int | None:
    """The partitions where group ``app`` stands behind the takeover, as ``/status`` says."""
    _, status = node.get("/status")
    groups = (status.get("checkpoints") or {}).get("groups", {})
    found: int | None = groups.get("app", {}).get("primary->backup", {}).get("behind_takeover")
    return found


def synced(backup: Broker) -> dict[tuple[str, int], int]:
    """The offsets group ``app`` holds on backup, synced there from primary."""
    return {
        ("primary.orders", p): offset
        for p, offset in committed(backup, "app", "primary.orders").items()
        if offset is not None
    }
