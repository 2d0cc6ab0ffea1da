"""``replicator failover``: move a consumer group to another cluster with exact positions.

For each partition of each replicated topic the group has a position in, in the source cluster
A, the position in the target cluster B comes from
:class:`~replicator.failover.group_positions.GroupTranslator` (exact: nothing unconsumed is
skipped, the repeats are counted). When A does not answer (or with
``--from-checkpoint``), the latest checkpoints kept in B (:mod:`replicator.failover.checkpoints`)
stand in for A, and their age is said. ``--execute`` commits the positions in B as a group with no
member may be committed to, and refuses while the group has active members there or while a
partition cannot be translated.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from replicator import clock
from replicator.config.settings import Settings
from replicator.errors import ClusterUnavailable, FailoverRefused, ReplicatorError, first_error
from replicator.failover.checkpoints import Checkpoint, CheckpointKey, read_latest
from replicator.failover.group_positions import (
    GroupTranslator,
    PartitionJob,
    PartitionMove,
    active_members,
)
from replicator.kafka.clients import ClusterClient, GroupOffsets
from replicator.kafka.readers import cluster_partitions
from replicator.kafka.translation import said, translate
from replicator.lifecycle import close_quietly
from replicator.model.handover import Handover
from replicator.telemetry.logs import print_table


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


@dataclass(frozen=True)
class FailoverRequest:
    """What ``replicator failover`` was asked: move ``group`` from ``source`` to ``target``."""

    group: str
    source: str
    target: str
    topics: list[str] | None = None  # topics of the source; None: every one it reads
    from_checkpoint: bool = False  # even if the source answers
    execute: bool = False  # commit (else a dry run)


async def plan_failover(settings: Settings, request: FailoverRequest) -> FailoverPlan:
    """The group's positions in the target, translated from the source (or from the checkpoints
    in the target when the source does not answer); committed when the request says so."""
    group, source, target = request.group, request.source, request.target
    translator = GroupTranslator(settings, source, target)
    timeout = settings.request_timeout_ms / 1000
    try:
        kept = await read_latest(settings, source, target, timeout * 3, [group])
    except Exception as exc:  # the first contact with the target: say which cluster
        raise unreachable(exc, settings, target) from exc
    checkpoints = kept.checkpoints.get(group, {})
    jobs, unmoved, source_error = await _source_jobs(
        settings, request, translator, checkpoints, kept.handovers
    )
    if source_error is not None:
        jobs = _checkpoint_jobs(settings, request, checkpoints, source_error)
    moves = await translator.translate(jobs, live=source_error is None)
    return await _in_target(settings, request, translator, jobs, moves, unmoved, source_error)


async def _source_jobs(
    settings: Settings,
    request: FailoverRequest,
    translator: GroupTranslator,
    checkpoints: dict[CheckpointKey, Checkpoint],
    handovers: dict[CheckpointKey, Handover],
) -> tuple[list[PartitionJob], list[str], str | None]:
    """The partitions to translate, read from the source; the source's topics nothing here
    replicates into the target; why the source was not read (``None``: it was)."""
    group, source = request.group, request.source
    if request.from_checkpoint:
        return [], [], "--from-checkpoint"
    timeout = settings.request_timeout_ms / 1000
    jobs: list[PartitionJob] = []
    unmoved: list[str] = []
    source_error: str | None = None
    reader = translator.reader(source, "positions")
    try:
        await asyncio.wait_for(reader.start(), timeout)
        jobs, unmoved = await asyncio.wait_for(
            translator.jobs(reader, group, request.topics, checkpoints, handovers), timeout
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
    return jobs, unmoved, source_error


def _checkpoint_jobs(
    settings: Settings,
    request: FailoverRequest,
    checkpoints: dict[CheckpointKey, Checkpoint],
    source_error: str,
) -> list[PartitionJob]:
    """The partitions to translate from the checkpoints kept in the target, the source not
    read (refused when there are none)."""
    group, source, target, topics = request.group, request.source, request.target, request.topics
    wanted = set(topics) if topics is not None else None
    jobs = [
        PartitionJob(cp.topic, cp.partition, cp.target_topic, cp.source_offset, cp.sync_point, cp)
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
    return jobs


async def _in_target(
    settings: Settings,
    request: FailoverRequest,
    translator: GroupTranslator,
    jobs: list[PartitionJob],
    moves: list[PartitionMove],
    unmoved: list[str],
    source_error: str | None,
) -> FailoverPlan:
    """The plan, completed in the target (its partitions without checkpoint, the group's
    members and committed offsets) and executed if asked."""
    group, source, target = request.group, request.source, request.target
    client = ClusterClient(target, settings.clusters[target], settings.client_timings())
    reader = translator.reader(target, "group")
    try:
        await reader.start()
        if source_error is not None:
            moves += await _without_checkpoint(reader, jobs, source)
        members = await active_members(client, group)
        offsets = GroupOffsets(reader, group)
        tps = [TopicPartition(m.target_topic, m.partition) for m in moves]
        committed = await offsets.fetch(tps) if tps else {}
        moves = [
            replace(
                m, committed_in_target=committed.get(TopicPartition(m.target_topic, m.partition))
            )
            for m in moves
        ]
        plan = FailoverPlan(group, source, target, moves, source_error, members)
        if unmoved:
            plan.notes.append(
                f"group {group} also has positions in {', '.join(unmoved)} in {source}, which "
                f"nothing in this configuration replicates into {target}: not moved (run the "
                "command with the environment of the replicator that runs those flows)"
            )
        if request.execute:
            await _execute(plan, offsets)
        return plan
    except FailoverRefused:
        raise
    except Exception as exc:
        raise unreachable(exc, settings, target) from exc
    finally:
        await close_quietly(reader.stop())
        await client.close()


def unreachable(exc: BaseException, settings: Settings, cluster: str) -> ReplicatorError:
    """``exc`` as the error tree has it, naming ``cluster`` and its address when it did not
    answer (the address holds no secret); used by ``failover`` and ``rpo``."""
    error = exc if isinstance(exc, ReplicatorError) else translate(first_error(exc))
    if isinstance(error, ClusterUnavailable):
        where = settings.clusters[cluster].bootstrap_servers
        return ClusterUnavailable(f"{cluster} does not answer at {where}: {said(error)}")
    return error


async def _without_checkpoint(
    reader: AIOKafkaConsumer, jobs: list[PartitionJob], source: str
) -> list[PartitionMove]:
    """The target's partitions of the checkpointed topics that have no checkpoint: with the
    source gone, their position is unknown (committing the others alone would leave them to
    the group's ``auto.offset.reset``)."""
    held = await cluster_partitions(reader)
    have = {(job.target_topic, job.partition) for job in jobs}
    topics = {job.target_topic: job.topic for job in jobs}
    unknown = f"no checkpoint of this partition: its position in {source} is unknown"
    missing = [
        (topic, p, target_topic)
        for target_topic, topic in sorted(topics.items())
        for p in held.get(target_topic, ())
        if (target_topic, p) not in have
    ]
    return [PartitionMove(t, p, tt, None, None, 0, None, problem=unknown) for t, p, tt in missing]


async def _execute(plan: FailoverPlan, offsets: GroupOffsets) -> None:
    """Commit the plan's positions, or refuse (nothing committed)."""
    untranslated = [f"{m.topic}/{m.partition}: {m.problem}" for m in plan.moves if m.problem]
    if untranslated:
        raise FailoverRefused(
            f"{len(untranslated)} partition(s) cannot be translated, nothing committed: "
            + "; ".join(untranslated)
        )
    if plan.active_members:
        raise FailoverRefused(
            f"group {plan.group} has {plan.active_members} active member(s) in {plan.target}: "
            "stop them first (a group's position can only be set while nobody consumes)"
        )
    positions = {
        TopicPartition(m.target_topic, m.partition): m.target_position
        for m in plan.moves
        if m.target_position is not None
    }
    if positions:
        await offsets.commit(positions)
        plan.executed = True
    else:
        plan.notes.append("nothing to commit: the group has no position to move")


def failover(
    settings: Settings,
    request: FailoverRequest,
    as_json: bool,
    echo: Callable[[str], None] = print,
) -> int:
    """Print (and if asked commit) the group's translated positions; the exit status."""
    began = clock.monotonic()
    group = request.group
    try:
        plan = asyncio.run(plan_failover(settings, request))
    except Exception as raised:
        refused = isinstance(first_error(raised), FailoverRefused)
        message = f"{'refused' if refused else 'failed'}: {said(raised)}"
        if as_json:
            print(json.dumps({"group": group, "error": message, "executed": False}))
        else:
            echo(message)
        return 1
    seconds = clock.monotonic() - began
    if as_json:
        print(json.dumps({**plan.shown(), "seconds": round(seconds, 3)}))
        return 0
    _print(plan, seconds)
    return 0


def _print(plan: FailoverPlan, seconds: float) -> None:
    console = Console(width=max(Console().width, 120))
    if plan.source_error is not None:
        ages = [m.checkpoint_age_s for m in plan.moves if m.checkpoint_age_s is not None]
        span = f"{min(ages):.0f}" if ages else ""
        if ages and f"{max(ages):.0f}" != span:
            span += f"-{max(ages):.0f}"
        old = f", {span} s old" if ages else ""
        console.print(
            f"{plan.source} not read ({plan.source_error}): translated from the checkpoints "
            f"in {plan.target}{old}; what the group consumed in {plan.source} after them is "
            "read again"
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
    print_table(console, table)  # headers and cells whole, never cut short
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
