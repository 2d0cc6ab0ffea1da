"""Moving a consumer group to another cluster: ``replicator failover``, and the translation of a
whole group that the continuous checkpoints reuse.

For each partition of each replicated topic the group has a position in, in the source cluster
A, the position in the target cluster B comes from :func:`replicator.translation.translate` (exact:
nothing unconsumed is skipped, the repeats are counted). When A does not answer (or with
``--from-checkpoint``), the latest checkpoints kept in B (:mod:`replicator.checkpoints`) stand in
for A, and their age is said. ``--execute`` commits the positions in B as a group with no member
may be committed to, and refuses while the group has active members there.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from replicator import translation
from replicator.checkpoints import Checkpoint, CheckpointKey, read_latest
from replicator.errors import ClusterUnavailable, ReplicatorError
from replicator.kafka import ClusterClient, GroupOffsets, make_reader, translate
from replicator.lifecycle import close_quietly
from replicator.readback import cluster_partitions
from replicator.settings import Settings
from replicator.topology import counterpart
from replicator.translation import (
    ConsumedScan,
    Frontier,
    Identities,
    KafkaPartitionLog,
    SyncPoint,
    Translation,
)

_WORKERS = 4
_INTERNAL_PREFIXES = ("__",)


@dataclass(frozen=True, slots=True)
class PartitionJob:
    """One partition to translate: its topic in A and in B, and the group's position in A."""

    topic: str
    partition: int
    target_topic: str
    position: int | None
    since: SyncPoint | None = None
    checkpoint: Checkpoint | None = None  # standing in for an unreachable source

    @property
    def key(self) -> CheckpointKey:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """A partition's translated position (``None``: the group has none in A, so none in B)."""

    topic: str
    partition: int
    target_topic: str
    source_position: int | None
    target_position: int | None
    repeats: int
    target_log_end: int | None
    frontier: Frontier = field(default_factory=Frontier)
    scanned: int = 0
    seconds: float = 0.0
    checkpoint_age_s: float | None = None
    committed_in_target: int | None = None
    problem: str | None = None  # why the partition could not be translated

    def checkpoint(self, group: str, source: str, target: str, at_ms: int) -> Checkpoint | None:
        """This translation as a checkpoint (none without a position)."""
        if self.source_position is None or self.target_position is None:
            return None
        return Checkpoint(
            group,
            source,
            target,
            self.topic,
            self.partition,
            self.target_topic,
            self.source_position,
            self.target_position,
            self.repeats,
            self.frontier,
            at_ms,
        )

    def shown(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "target_topic": self.target_topic,
            "source_position": self.source_position,
            "target_position": self.target_position,
            "repeats": self.repeats,
            "target_log_end": self.target_log_end,
            "committed_in_target": self.committed_in_target,
            "checkpoint_age_s": self.checkpoint_age_s,
            "records_read": self.scanned,
            "problem": self.problem,
        }


def identities(
    cluster: str, topic: str, partition: int, other_topic: str, suffix: str
) -> Identities:
    """How records of ``topic`` in ``cluster`` are identified, against ``other_topic``."""
    names = frozenset({topic, other_topic, topic + suffix, other_topic + suffix})
    return Identities(cluster, topic, partition, names)


class GroupTranslator:
    """Translates one group's positions from cluster ``source`` to ``target``: readers of both
    (the source's may be absent: then only checkpoints translate), a few partitions at a time."""

    def __init__(self, settings: Settings, source: str, target: str) -> None:
        self.settings = settings
        self.source = source
        self.target = target
        self._timeout = settings.request_timeout_ms / 1000

    def reader(self, alias: str, role: str) -> AIOKafkaConsumer:
        return make_reader(
            self.settings.clusters[alias], self.settings, f"replicator-failover-{role}-{alias}"
        )

    async def jobs(
        self,
        reader: AIOKafkaConsumer,
        group: str,
        topics: Iterable[str] | None,
        checkpoints: dict[CheckpointKey, Checkpoint],
    ) -> tuple[list[PartitionJob], list[str]]:
        """The group's positions in the source's replicated topics (``topics``: only those),
        and the topics it has positions in that nothing replicates into the target."""
        existing = await cluster_partitions(reader)
        listed = topics if topics is not None else sorted(existing)
        partitions: list[tuple[TopicPartition, str | None]] = []
        for topic in listed:
            if topic.startswith(_INTERNAL_PREFIXES) or topic == self.settings.checkpoints_topic:
                continue
            other = counterpart(self.settings, topic, self.source, self.target)
            for p in existing.get(topic, ()):
                partitions.append((TopicPartition(topic, p), other))
        found = await GroupOffsets(reader._client, group).fetch([tp for tp, _ in partitions])
        jobs = []
        unmoved: set[str] = set()
        for tp, other in partitions:
            position = found[tp]
            if other is None:
                if position is not None:
                    unmoved.add(tp.topic)
                continue
            if position is None and topics is None:
                continue  # the group does not read this topic
            cp = checkpoints.get((tp.topic, tp.partition))
            since = cp.sync_point if cp is not None and cp.target_topic == other else None
            jobs.append(PartitionJob(tp.topic, tp.partition, other, position, since))
        return jobs, sorted(unmoved)

    async def translate(self, jobs: list[PartitionJob], live: bool) -> list[PartitionMove]:
        """Translate every job; ``live``: the source answers (else checkpoints only)."""
        pending = list(reversed(jobs))
        moves: dict[CheckpointKey, PartitionMove] = {}
        held: dict[str, list[int]] = {}  # the target's partitions

        async def work() -> None:
            source = self.reader(self.source, "source") if live else None
            target = self.reader(self.target, "target")
            try:
                if source is not None:
                    await source.start()
                await target.start()
                held.update(await cluster_partitions(target))
                while pending:
                    job = pending.pop()
                    moves[job.key] = await asyncio.wait_for(
                        self._one(job, source, target, held), self._timeout * 10
                    )
            finally:
                for reader in (source, target):
                    if reader is not None:
                        await close_quietly(reader.stop())

        async with asyncio.TaskGroup() as workers:
            for _ in range(min(_WORKERS, len(jobs))):
                workers.create_task(work())
        return [moves[job.key] for job in jobs]

    async def _one(
        self,
        job: PartitionJob,
        source: AIOKafkaConsumer | None,
        target: AIOKafkaConsumer,
        held: dict[str, list[int]],
    ) -> PartitionMove:
        suffix = self.settings.replica_suffix
        if job.position is None:
            return PartitionMove(job.topic, job.partition, job.target_topic, None, None, 0, None)
        if job.partition not in held.get(job.target_topic, ()):
            problem = f"{self.target} has no partition {job.target_topic}/{job.partition}"
            return PartitionMove(
                job.topic, job.partition, job.target_topic, job.position, None, 0, None,
                problem=problem,
            )  # fmt: skip
        b_ids = identities(self.target, job.target_topic, job.partition, job.topic, suffix)
        tp_b = TopicPartition(job.target_topic, job.partition)
        target_log = KafkaPartitionLog(target, tp_b, b_ids)
        if job.checkpoint is not None:
            consumed = ConsumedScan(None, job.position, job.since)
        else:
            assert source is not None
            a_ids = identities(self.source, job.topic, job.partition, job.target_topic, suffix)
            tp_a = TopicPartition(job.topic, job.partition)
            consumed = ConsumedScan(KafkaPartitionLog(source, tp_a, a_ids), job.position, job.since)
        result: Translation = await translation.translate(target_log, consumed)
        age = job.checkpoint.age_s() if job.checkpoint is not None else None
        return PartitionMove(
            job.topic,
            job.partition,
            job.target_topic,
            job.position,
            result.position,
            result.repeats,
            result.log_end,
            result.frontier,
            result.scanned_source + result.scanned_target,
            result.seconds,
            age,
        )


@dataclass
class FailoverPlan:
    group: str
    source: str
    target: str
    moves: list[PartitionMove]
    source_error: str | None = None  # why the source was not read (checkpoints used instead)
    active_members: int = 0
    executed: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def from_checkpoint(self) -> bool:
        return any(m.checkpoint_age_s is not None for m in self.moves)

    def shown(self) -> dict[str, Any]:
        ages = [m.checkpoint_age_s for m in self.moves if m.checkpoint_age_s is not None]
        return {
            "group": self.group,
            "source": self.source,
            "target": self.target,
            "source_unreachable": self.source_error,
            "from_checkpoint": self.from_checkpoint,
            "checkpoint_age_s": max(ages) if ages else None,
            "active_members_in_target": self.active_members,
            "executed": self.executed,
            "repeats": sum(m.repeats for m in self.moves),
            "partitions": [m.shown() for m in self.moves],
            "notes": self.notes,
        }


class FailoverRefused(ReplicatorError):
    """The group cannot be moved as asked (active members in the target, nothing to move from)."""

    retriable = False


async def active_members(client: ClusterClient, group: str) -> int:
    """How many members the group has in the cluster right now."""
    admin = await client.admin()
    described = await admin.describe_consumer_groups([group])
    members = 0
    for response in described:
        for entry in response.groups:
            state, found = entry[2], entry[5]
            if state not in ("Dead", "Empty"):
                members += len(found)
    return members


async def plan_failover(
    settings: Settings,
    group: str,
    source: str,
    target: str,
    topics: list[str] | None,
    from_checkpoint: bool,
    execute: bool,
) -> FailoverPlan:
    translator = GroupTranslator(settings, source, target)
    timeout = settings.request_timeout_ms / 1000
    target_reader = translator.reader(target, "checkpoints")
    await target_reader.start()
    try:
        checkpoints = await read_latest(
            target_reader, settings.checkpoints_topic, group, source, timeout * 3
        )
    finally:
        await close_quietly(target_reader.stop())
    source_error: str | None = "--from-checkpoint" if from_checkpoint else None
    jobs: list[PartitionJob] = []
    unmoved: list[str] = []
    if not from_checkpoint:
        reader = translator.reader(source, "positions")
        try:
            await asyncio.wait_for(reader.start(), timeout)
            jobs, unmoved = await asyncio.wait_for(
                translator.jobs(reader, group, topics, checkpoints), timeout
            )
        except TimeoutError:
            source_error = f"no answer from {source} in {timeout:.0f}s"
        except Exception as exc:
            error = translate(exc)
            if not isinstance(error, ClusterUnavailable):
                raise error from exc
            source_error = f"{error}: could not reach {source}"
        finally:
            await close_quietly(reader.stop())
    if source_error is not None:
        wanted = set(topics) if topics is not None else None
        jobs = [
            PartitionJob(
                cp.topic, cp.partition, cp.target_topic, cp.source_offset, cp.sync_point, cp
            )
            for (topic, _), cp in sorted(checkpoints.items())
            if wanted is None or topic in wanted
        ]
        if not jobs:
            raise FailoverRefused(
                f"{source} cannot be read ({source_error}) and {target} holds no checkpoint of "
                f"group {group} from {source} in {settings.checkpoints_topic}: set "
                "REPLICATOR_SYNC_GROUPS on the replicator beside "
                f"{source} so checkpoints are kept"
            )
    moves = await translator.translate(jobs, live=source_error is None)
    client = ClusterClient(target, settings.clusters[target], settings)
    try:
        members = await active_members(client, group)
        committed = await _committed(translator, group, moves)
        moves = [
            _with_committed(m, committed.get(TopicPartition(m.target_topic, m.partition)))
            for m in moves
        ]
        plan = FailoverPlan(group, source, target, moves, source_error, members)
        if unmoved:
            plan.notes.append(
                f"group {group} also has positions in {', '.join(unmoved)} in {source}, which "
                f"nothing in this configuration replicates into {target}: not moved (run the "
                "command with the environment of the replicator that runs those flows)"
            )
        if execute:
            untranslated = [f"{m.topic}/{m.partition}: {m.problem}" for m in moves if m.problem]
            if untranslated:
                raise FailoverRefused(
                    f"{len(untranslated)} partition(s) cannot be translated, nothing committed: "
                    + "; ".join(untranslated)
                )
            if members:
                raise FailoverRefused(
                    f"group {group} has {members} active member(s) in {target}: stop them "
                    "first (a group's position can only be set while nobody consumes)"
                )
            await _commit(translator, group, moves)
            plan.executed = True
        return plan
    finally:
        await client.close()


def _with_committed(move: PartitionMove, committed: int | None) -> PartitionMove:
    return replace(move, committed_in_target=committed)


async def _committed(
    translator: GroupTranslator, group: str, moves: list[PartitionMove]
) -> dict[TopicPartition, int | None]:
    reader = translator.reader(translator.target, "group")
    await reader.start()
    try:
        tps = [TopicPartition(m.target_topic, m.partition) for m in moves]
        return await GroupOffsets(reader._client, group).fetch(tps) if tps else {}
    finally:
        await close_quietly(reader.stop())


async def _commit(translator: GroupTranslator, group: str, moves: list[PartitionMove]) -> None:
    positions = {
        TopicPartition(m.target_topic, m.partition): m.target_position
        for m in moves
        if m.target_position is not None
    }
    if not positions:
        return
    reader = translator.reader(translator.target, "commit")
    await reader.start()
    try:
        await GroupOffsets(reader._client, group).commit(positions)
    finally:
        await close_quietly(reader.stop())


def failover(
    settings: Settings,
    group: str,
    source: str,
    target: str,
    topics: list[str] | None,
    from_checkpoint: bool,
    execute: bool,
    as_json: bool,
    echo: Callable[[str], None] = print,
) -> int:
    """Print (and with ``execute`` commit) the group's translated positions; the exit status."""
    began = time.monotonic()
    try:
        plan = asyncio.run(
            plan_failover(settings, group, source, target, topics, from_checkpoint, execute)
        )
    except Exception as exc:
        refused = isinstance(exc, FailoverRefused)
        error = exc if isinstance(exc, ReplicatorError) else translate(exc)
        message = f"{'refused' if refused else 'failed'}: {error or type(exc).__name__}"
        if as_json:
            print(json.dumps({"group": group, "error": message, "executed": False}))
        else:
            echo(message)
        return 1
    seconds = time.monotonic() - began
    if as_json:
        print(json.dumps({**plan.shown(), "seconds": round(seconds, 3)}))
        return 0
    _print(plan, seconds)
    return 0


def _print(plan: FailoverPlan, seconds: float) -> None:
    console = Console(width=max(Console().width, 120))
    if plan.source_error is not None:
        ages = [m.checkpoint_age_s for m in plan.moves if m.checkpoint_age_s is not None]
        console.print(
            f"{plan.source} not read ({plan.source_error}): translated from the checkpoints "
            f"in {plan.target}, {min(ages):.0f}-{max(ages):.0f} s old; what the group consumed "
            f"in {plan.source} after them is read again"
        )
    for note in plan.notes:
        console.print(f"note: {note}")
    if not plan.moves:
        console.print(
            f"group {plan.group} has no position in {plan.source} in any topic replicated to "
            f"{plan.target}: nothing to move (in {plan.target} it starts as its "
            "auto.offset.reset says)"
        )
        return
    table = Table(title=f"group {plan.group}: {plan.source} -> {plan.target}")
    for column in (
        "topic",
        "partition",
        f"position in {plan.source}",
        f"topic in {plan.target}",
        f"position in {plan.target}",
        "read again",
        f"now in {plan.target}",
    ):
        table.add_column(column, justify="right")
    for m in plan.moves:
        table.add_row(
            m.topic,
            str(m.partition),
            _shown(m.source_position),
            m.target_topic,
            _shown(m.target_position),
            str(m.repeats),
            _shown(m.committed_in_target),
        )
    console.print(table)
    for m in plan.moves:
        if m.problem is not None:
            console.print(f"[bold]not translated[/]: {m.topic}/{m.partition}: {m.problem}")
    total = sum(m.repeats for m in plan.moves)
    read = sum(m.scanned for m in plan.moves)
    console.print(
        f"{len(plan.moves)} partitions, {total} records will be read again; "
        f"{read} records read to translate, {seconds:.2f} s"
    )
    if plan.executed:
        console.print(f"committed in {plan.target}: group {plan.group} continues there")
    else:
        members = plan.active_members
        state = f" (it has {members} active member(s) there: stop them first)" if members else ""
        console.print(f"dry run: add --execute to commit these positions in {plan.target}{state}")


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)
