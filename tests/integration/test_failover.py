"""Moving a consumer group between datacenters with exact positions (``replicator failover``).

The oracle is record-level: what the group read in the first datacenter, plus what it reads in
the second from the translated positions, holds every record at least once, and the records it
reads twice are exactly the ones the dry run announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.kafka.readers import StoredRecord, partitions_of
from tests.integration.harness import (
    Broker,
    ReplicatorProcess,
    Start,
    create_topics,
    holds,
    produce,
    read,
    replicator_cli,
    replicator_env,
    run,
    start_clusters,
    wait_until,
)
from tests.integration.test_flows import flow_env

Identity = str


def identity(record: StoredRecord, cluster: str) -> Identity:
    """The record's origin: its provenance, or itself when written straight into the topic."""
    tag = record.provenance
    if tag is not None:
        return str(tag)
    return f"{cluster}/{record.topic}/{record.partition}/{record.offset}"


async def _consume(
    bootstrap: str, topic: str, group: str, upto: dict[int, int] | None
) -> list[StoredRecord]:
    """Read ``topic`` as ``group`` from its committed positions (else the log start) up to the
    positions ``upto`` (else the log end), and commit where it stopped."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = await partitions_of(consumer, topic)
        assert tps, f"{topic} does not exist"
        consumer.assign(tps)
        ends: dict[TopicPartition, int] = {}
        for tp in tps:
            committed = await consumer.committed(tp)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
        records: list[StoredRecord] = []
        done: set[TopicPartition] = set()
        deadline = time.monotonic() + 30
        while len(done) < len(tps):
            assert time.monotonic() < deadline, "the group did not reach its stop positions"
            batches = await consumer.getmany(timeout_ms=200)
            for tp, batch in batches.items():
                for r in batch:
                    if upto is not None and r.offset >= upto[tp.partition]:
                        break
                    records.append(StoredRecord.of(r, tp))
            for tp in tps:
                stop = upto[tp.partition] if upto is not None else consumer.highwater(tp)
                if stop is None:
                    continue
                if await consumer.position(tp) >= stop:
                    ends[tp] = stop
                    done.add(tp)
        await consumer.commit(ends)
        mine = {tp.partition: ends[tp] for tp in tps}
        return [r for r in records if r.offset < mine[r.partition]]
    finally:
        await consumer.stop()


def consume(
    broker: Broker, topic: str, group: str, upto: dict[int, int] | None = None
) -> list[StoredRecord]:
    return run(_consume(broker.bootstrap_servers, topic, group, upto))


@contextlib.contextmanager
def active_member(broker: Broker, topic: str, group: str) -> Iterator[None]:
    """A member of ``group`` subscribed to ``topic`` in ``broker``'s cluster, while inside."""

    async def join() -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap_servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="latest",
        )
        await consumer.start()
        await consumer.getmany(timeout_ms=3000)
        return consumer

    # The member's loop runs in a thread while inside, so it keeps heartbeating: a loop left
    # idle would let the coordinator evict the member after its session timeout (10 s).
    loop = asyncio.new_event_loop()
    consumer = loop.run_until_complete(join())
    running = threading.Thread(target=loop.run_forever, name=f"member of {group}", daemon=True)
    running.start()
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(consumer.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        running.join(timeout=30)
        loop.close()


def failover(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    status, out, err = replicator_cli(env, "failover", *args, "--json")
    lines = out.strip().splitlines()
    assert lines, f"no output (exit {status}): {err}"
    return status, json.loads(lines[-1]), err


def positions(result: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(p["topic"], p["partition"]): p["target_position"] for p in result["partitions"]}


def assert_exact_move(
    first: list[StoredRecord],
    first_cluster: str,
    rest: list[StoredRecord],
    rest_cluster: str,
    everything: list[StoredRecord],
    announced: int,
) -> None:
    """``first`` + ``rest`` read every record of ``everything`` (the topic in the second
    cluster), ``rest`` each at most once, and the records read twice are ``announced`` many."""
    before = {identity(r, first_cluster) for r in first}
    after = Counter(identity(r, rest_cluster) for r in rest)
    held = {identity(r, rest_cluster) for r in everything}
    assert len(held) == len(everything), "the topic itself holds a duplicate"
    assert not [k for k, n in after.items() if n > 1], "read twice after the move"
    skipped = held - before - set(after)
    assert not skipped, f"{len(skipped)} records never read, e.g. {sorted(skipped)[:5]}"
    again = before & set(after)
    assert len(again) == announced, f"read again: {len(again)}, announced {announced}"


def assert_translated(
    consumed: set[Identity], target: list[StoredRecord], cluster: str, result: dict[str, Any]
) -> None:
    """Each translated position in ``target`` is exact: every record before it was consumed,
    the record at it was not, and the consumed ones at or after it are the announced repeats."""
    repeats = 0
    for moved in result["partitions"]:
        held = sorted(
            (r for r in target if r.partition == moved["partition"]), key=lambda r: r.offset
        )
        at = moved["target_position"]
        before = [identity(r, cluster) for r in held if r.offset < at]
        after = [identity(r, cluster) for r in held if r.offset >= at]
        assert all(i in consumed for i in before), f"skipped in partition {moved['partition']}"
        if after:
            assert after[0] not in consumed, f"partition {moved['partition']} could start later"
        assert sum(i in consumed for i in after) == moved["repeats"], moved
        repeats += moved["repeats"]
    assert repeats == result["repeats"]


def test_a_group_fails_over_from_its_checkpoint_when_its_datacenter_is_lost(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        dc1_broker, dc2_broker = brokers["dc1"], brokers["dc2"]
        for broker in brokers.values():
            create_topics(broker, orders_REPLICA=3)

        def env(local: str, **extra: str) -> dict[str, str]:
            return replicator_env(
                local, brokers, sync_groups="app.*", sync_groups_interval_ms="1000", **extra
            )

        dc1 = replicators("dc1", env("dc1", sync_group_offsets="true"))
        # dc2's replicator starts cut off from dc1, so the two clusters' orders interleave the
        # origins in different orders: dc2 holds its early records before dc1's, dc1 after.
        alone = replicators("dc2", replicator_env("dc2", {"dc2": dc2_broker}))
        dc1.wait_ready()
        alone.wait_ready()
        sent = produce(dc2_broker, "orders_REPLICA", 300, partitions=3, tag="-early")
        wait_until(holds(dc2_broker, "orders", 300), 60, "dc2's early records in dc2")
        sent += produce(dc1_broker, "orders_REPLICA", 300, partitions=3)
        wait_until(holds(dc2_broker, "orders", 600), 60, "dc1's records in dc2")
        assert alone.stop() == 0
        dc2 = replicators("dc2", env("dc2"))
        dc2.wait_ready()
        wait_until(holds(dc1_broker, "orders", 600), 60, "dc2's early records in dc1, last")
        # Then both datacenters write at once.
        with ThreadPoolExecutor(2) as pool:
            for round_ in range(2):
                writes = [
                    pool.submit(produce, b, "orders_REPLICA", 150, 3, f"-{round_}")
                    for b in (dc1_broker, dc2_broker)
                ]
                sent += [r for w in writes for r in w.result()]
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 1200), 60, f"orders on {broker.alias}")

        # Three groups in dc1: part way (both origins interleaved), caught up, and one that
        # also has a member in dc2.
        first = consume(dc1_broker, "orders", "app.orders", {0: 150, 1: 333, 2: 390})
        assert {r.provenance.cluster for r in first if r.provenance} == {"dc1", "dc2"}
        consume(dc1_broker, "orders", "app.caught-up")
        consume(dc1_broker, "orders", "app.busy", {0: 10, 1: 10, 2: 10})
        committed_at = time.time()

        cli = env("dc2")
        with active_member(dc2_broker, "orders", "app.busy"):
            status, refused, _ = failover(
                cli, "--group", "app.busy", "--from", "dc1", "--to", "dc2", "--execute"
            )
            assert status == 1 and "active member" in refused["error"], refused
            wait_rounds(dc1, "app.busy", 2)  # two rounds with a member: its offsets untouched
            status, busy, _ = failover(cli, "--group", "app.busy", "--from", "dc1", "--to", "dc2")
            assert status == 0 and busy["active_members_in_target"] == 1
            assert {p["committed_in_target"] for p in busy["partitions"]} == {None}

        # A topic of dc1 that dc2 lacks: nothing is committed, and the partition is named.
        create_topics(dc1_broker, solo=1)
        consume(dc1_broker, "solo", "app.solo")
        status, partial, _ = failover(
            cli, "--group", "app.solo", "--from", "dc1", "--to", "dc2", "--topic", "solo",
            "--execute",
        )  # fmt: skip
        assert status == 1 and "dc2 has no partition solo/0" in partial["error"], partial

        status, none, _ = failover(cli, "--group", "app.nobody", "--from", "dc1", "--to", "dc2")
        assert status == 0 and none["partitions"] == [] and not none["executed"], none

        status, caught, _ = failover(
            cli, "--group", "app.caught-up", "--from", "dc1", "--to", "dc2"
        )
        assert status == 0 and caught["repeats"] == 0, caught
        assert len(caught["partitions"]) == 3
        assert all(p["target_position"] == p["target_log_end"] for p in caught["partitions"])

        # The checkpoints follow the group: one taken after its commit, and (a member in dc1,
        # none in dc2) its translated positions committed there.
        def checkpointed() -> bool:
            _, status_now = dc1.get("/status")
            group = (status_now["checkpoints"]["groups"].get("app.orders") or {}).get("dc1->dc2")
            return group is not None and group["age_s"] < time.time() - committed_at - 0.5

        def offsets_synced() -> bool:
            return dc1.metric("replicator_group_offsets_synced_total", group="app.orders") >= 3

        wait_until(checkpointed, 30, "a checkpoint of app.orders after its commit", dc1.log)
        # As MirrorMaker 2 does: a group that consumed in dc1 and closed (no member anywhere)
        # has its positions committed in dc2, where it has no active member.
        wait_until(offsets_synced, 30, "app.orders' offsets synced into dc2", dc1.log)
        status, live, _ = failover(cli, "--group", "app.orders", "--from", "dc1", "--to", "dc2")
        assert status == 0 and not live["from_checkpoint"], live
        # Partition 0: the group stopped half way through dc2's early records, which dc2 holds
        # before dc1's first 100 (all read): those 100 are read again there.
        (zero,) = [p for p in live["partitions"] if p["partition"] == 0]
        assert (zero["target_position"], zero["repeats"]) == (50, 100), zero
        status, table, err = replicator_cli(
            cli, "failover", "--group", "app.orders", "--from", "dc1", "--to", "dc2"
        )
        assert status == 0, err
        assert f"{live['repeats']} records will be read again" in table, table
        assert "dry run: add --execute" in table
        print(table)
        synced = {
            (p["topic"], p["partition"]): p["committed_in_target"] for p in live["partitions"]
        }
        assert synced == positions(live), "REPLICATOR_SYNC_GROUP_OFFSETS committed elsewhere"
        assert dc1.metric("replicator_group_offsets_synced_total", group="app.orders") >= 3
        # A checkpoint is written when it changes, not every round.
        written = dc1.metric("replicator_checkpoints_written_total", group="app.orders")
        assert written == 3
        wait_rounds(dc1, "app.orders", 1)
        assert dc1.metric("replicator_checkpoints_written_total", group="app.orders") == 3

        # A restart with checkpoints in the topic: they are read back (as the sync points) and
        # the rounds go on; nothing changed, so nothing is written again.
        assert dc1.stop() == 0
        dc1 = replicators("dc1", env("dc1", sync_group_offsets="true"))
        dc1.wait_ready()
        wait_rounds(dc1, "app.orders", 2)
        # The one failure is app.solo's (its topic is not in dc2), as before the restart.
        failed = [line for line in dc1.log().splitlines() if '"checkpoints failed"' in line]
        assert all('"error": "app.solo: solo/0: dc2 has no partition' in f for f in failed), failed
        assert dc1.metric("replicator_checkpoints_written_total", group="app.orders") == 0

        # Disaster: dc1 is lost; dc2's applications go on writing.
        more = produce(dc2_broker, "orders_REPLICA", 90, partitions=3, tag="-after")
        dc1.kill()
        dc1_broker.stop()
        wait_until(holds(dc2_broker, "orders", 1290), 60, "dc2's own records after the loss")

        status, unknown, _ = failover(cli, "--group", "app.nobody", "--from", "dc1", "--to", "dc2")
        assert status == 1 and "holds no checkpoint of group app.nobody" in unknown["error"]
        status, dry, err = failover(cli, "--group", "app.orders", "--from", "dc1", "--to", "dc2")
        assert status == 0, err
        assert dry["from_checkpoint"] and dry["source_unreachable"], dry
        assert dry["checkpoint_age_s"] is not None and dry["checkpoint_age_s"] < 120
        assert positions(dry) == positions(live)
        assert dry["repeats"] == live["repeats"]
        status, done, err = failover(
            cli, "--group", "app.orders", "--from", "dc1", "--to", "dc2", "--execute"
        )
        assert status == 0 and done["executed"], (done, err)

        at_failover = read(dc2_broker, "orders")
        assert_translated({identity(r, "dc1") for r in first}, at_failover, "dc2", dry)
        rest = consume(dc2_broker, "orders", "app.orders")
        everything = read(dc2_broker, "orders")
        assert len(everything) == len(sent) + len(more)
        assert_exact_move(first, "dc1", rest, "dc2", everything, dry["repeats"])
        print(
            f"failover from a checkpoint: {len(first)} read in dc1, {len(rest)} in dc2, "
            f"{dry['repeats']} read twice (announced)"
        )


def wait_rounds(replicator: ReplicatorProcess, group: str, rounds: int) -> None:
    """Wait for ``rounds`` checkpoint rounds of ``group`` (dc1 -> dc2) to end after now."""
    for _ in range(rounds):
        since = time.time()

        def round_ended(since: float = since) -> bool:
            _, status = replicator.get("/status")
            latest = (status["checkpoints"]["groups"].get(group) or {}).get("dc1->dc2")
            return latest is not None and latest["age_s"] < time.time() - since - 0.1

        wait_until(round_ended, 30, f"a checkpoint round of {group}", replicator.log)


def only(result: dict[str, Any], topic: str) -> dict[str, Any]:
    """``result`` (a failover's JSON) for the partitions of one source topic."""
    partitions = [p for p in result["partitions"] if p["topic"] == topic]
    return {**result, "partitions": partitions, "repeats": sum(p["repeats"] for p in partitions)}


def test_flows_fail_over_and_back_exactly_same_name_and_renamed(replicators: Start) -> None:
    """Identity flows both ways (applications write ``orders`` itself) and an MM2-named flow
    (``events`` of dc1 -> ``dc1.events`` in dc2); one group reads both in dc1, moves to dc2 while
    dc1 runs, reads on there, and moves back."""
    with start_clusters("dc1", "dc2") as brokers:
        dc1_broker, dc2_broker = brokers["dc1"], brokers["dc2"]
        create_topics(dc1_broker, orders=3, events=2)
        create_topics(dc2_broker, orders=3)
        envs = {
            alias: replicator_env(alias, brokers, replica_mode="false")
            | flow_env(f"{alias}_to_{other}", alias, other, topics_include="orders")
            for alias, other in (("dc1", "dc2"), ("dc2", "dc1"))
        }
        envs["dc1"] |= flow_env(
            "events", "dc1", "dc2", naming="source-alias", topics_include="events"
        )
        # The command runs with an environment that knows every flow involved.
        every_flow = {**envs["dc1"], **envs["dc2"]}
        # dc2's replicator starts last, so each cluster holds its own records first.
        replicators("dc1", envs["dc1"]).wait_ready()
        produce(dc2_broker, "orders", 300, partitions=3)
        produce(dc1_broker, "orders", 300, partitions=3)
        produce(dc1_broker, "events", 200, partitions=2)
        wait_until(holds(dc2_broker, "orders", 600), 60, "orders on dc2")
        replicators("dc2", envs["dc2"]).wait_ready()
        wait_until(holds(dc1_broker, "orders", 600), 60, "orders on dc1")
        wait_until(holds(dc2_broker, "dc1.events", 200), 60, "dc1.events on dc2")

        first = consume(dc1_broker, "orders", "app", {0: 70, 1: 100, 2: 130})
        first_events = consume(dc1_broker, "events", "app", {0: 40, 1: 60})
        # Without the MM2-named flow in its environment, the command says what it leaves.
        status, partial, _ = failover(envs["dc2"], "--group", "app", "--from", "dc1", "--to", "dc2")
        assert status == 0 and {p["topic"] for p in partial["partitions"]} == {"orders"}
        assert "events" in partial["notes"][0] and "not moved" in partial["notes"][0]
        status, over, err = failover(
            every_flow, "--group", "app", "--from", "dc1", "--to", "dc2", "--execute"
        )
        assert status == 0 and over["executed"], (over, err)
        assert {(p["topic"], p["target_topic"]) for p in over["partitions"]} == {
            ("orders", "orders"),
            ("events", "dc1.events"),
        }
        stops = {"orders": {0: 150, 1: 160, 2: 170}, "dc1.events": {0: 70, 1: 80}}
        second = consume(dc2_broker, "orders", "app", stops["orders"])
        second_events = consume(dc2_broker, "dc1.events", "app", stops["dc1.events"])
        status, back, err = failover(
            every_flow, "--group", "app", "--from", "dc2", "--to", "dc1", "--execute"
        )
        assert status == 0 and back["executed"], err
        assert {(p["topic"], p["target_topic"]) for p in back["partitions"]} == {
            ("orders", "orders"),
            ("dc1.events", "events"),
        }
        third = consume(dc1_broker, "orders", "app")
        third_events = consume(dc1_broker, "events", "app")

        for topic, there, read_first, read_second, read_third in (
            ("orders", "orders", first, second, third),
            ("events", "dc1.events", first_events, second_events, third_events),
        ):
            in_dc1 = read(dc1_broker, topic)
            in_dc2 = read(dc2_broker, there)
            assert {identity(r, "dc1") for r in in_dc1} == {identity(r, "dc2") for r in in_dc2}
            before = {identity(r, "dc1") for r in read_first}
            assert_translated(before, in_dc2, "dc2", only(over, topic))
            # Back: what dc2's positions say the group consumed (its repeats included).
            consumed_there = [r for r in in_dc2 if r.offset < stops[there][r.partition]]
            assert {identity(r, "dc2") for r in read_second} <= {
                identity(r, "dc2") for r in consumed_there
            }
            moved_back = only(back, there)
            assert_translated(
                {identity(r, "dc2") for r in consumed_there}, in_dc1, "dc1", moved_back
            )
            assert_exact_move(
                consumed_there, "dc2", read_third, "dc1", in_dc1, moved_back["repeats"]
            )
        # orders interleaves two origins differently in each cluster: some records are read
        # again; events has one origin: none.
        assert only(over, "orders")["repeats"] > 0 and only(back, "orders")["repeats"] > 0
        assert only(over, "events")["repeats"] == 0 == only(back, "dc1.events")["repeats"]
