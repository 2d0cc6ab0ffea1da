"""``replicator rpo``: what a lost datacenter's ``_REPLICA`` topics held that this one lacks.

When a datacenter is lost, the records its applications had published to ``<topic>_REPLICA``
and its replicator had not yet copied are behind: the recovery point. Beside a surviving cluster
this reads, per partition of the lost cluster's replica topics, the **newest record of that
origin the surviving cluster holds** (by provenance, reading the destination partition back from
its end), its timestamp and its age. The leg writes an origin partition's records in order, so
every record of the origin before it is here too, and everything the origin took after it is
not. When the origin answers (it came back, or it was never gone) the records it holds after
that one are counted exactly (committed data only, as the legs read them): what its replicator
still has to copy. Records the origin no longer holds (retention) and this cluster never got
are counted apart: those are lost.

Pure logic over the :class:`ReadBack` protocol (its in-memory fake is in
``tests/unit/failover/test_recovery_point.py``); :class:`KafkaReadBack` reads a real cluster with
one consumer of no group, every partition's window in the same fetches.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from replicator.config.settings import Settings
from replicator.config.topology import REPLICA_FEED, FeedPlan, feeds_for
from replicator.errors import ClusterUnavailable, ConfigError
from replicator.failover.plan import unreachable
from replicator.kafka.clients import client_options
from replicator.kafka.readers import StoredRecord, cluster_partitions, count_ranges, read_ranges
from replicator.kafka.translation import said
from replicator.lifecycle import close_quietly
from replicator.model.provenance import Tagger
from replicator.telemetry.logs import print_table
from replicator.topics.snapshot import snapshot, topic_selection

_FIRST_WINDOW = 1_000
_MAX_WINDOW = 50_000  # records of one partition held at once
_ORIGIN_TIMEOUT_S = 15.0


class ReadBack(Protocol):
    """The partitions of one cluster, read back in windows."""

    async def bounds(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Log start and log end of each partition that exists."""
        ...

    async def read(
        self, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, list[StoredRecord]]:
        """The records of each partition in ``[start, end)``, in order."""
        ...


@dataclass(frozen=True, slots=True)
class Newest:
    """The newest record of one origin partition found in a destination partition."""

    origin_offset: int
    timestamp_ms: int
    read: int  # destination records read to find it


async def newest_of_origins(
    log: ReadBack, origins: dict[TopicPartition, Tagger]
) -> dict[TopicPartition, Newest | None]:
    """Per destination partition, the record of the highest offset of its origin (``origins``
    names each destination partition's origin), read back from the log end in growing windows,
    all partitions' windows in the same reads; ``None`` where the whole log holds none."""
    bounds = await log.bounds(list(origins))
    found: dict[TopicPartition, Newest | None] = {tp: None for tp in origins}
    read_so_far = dict.fromkeys(origins, 0)
    pending = {tp: bounds[tp][1] for tp in origins if tp in bounds}  # read below this offset
    window = _FIRST_WINDOW
    while pending:
        ranges = {tp: (max(bounds[tp][0], top - window), top) for tp, top in pending.items()}
        records = await log.read(ranges)
        for tp, (begin, _) in ranges.items():
            batch = records.get(tp, [])
            read_so_far[tp] += len(batch)
            best = _highest(batch, origins[tp])
            if best is not None:
                found[tp] = Newest(*best, read_so_far[tp])
                del pending[tp]
            elif begin <= bounds[tp][0]:
                del pending[tp]
            else:
                pending[tp] = begin
        window = min(window * 4, _MAX_WINDOW)
    return found


def _highest(records: list[StoredRecord], origin: Tagger) -> tuple[int, int] | None:
    """The highest origin offset among ``records`` of ``origin``, and that record's timestamp."""
    best: tuple[int, int] | None = None
    for record in records:
        offset = origin.origin_offset(record.headers)
        if offset is not None and (best is None or offset > best[0]):
            best = (offset, record.timestamp)
    return best


class KafkaReadBack:
    """:class:`ReadBack` over a started consumer of no group: one ListOffsets per broker for the
    bounds, every window in the same fetches (:func:`~replicator.kafka.readers.read_ranges`)."""

    def __init__(self, consumer: AIOKafkaConsumer, timeout: float) -> None:
        self._consumer = consumer
        self._timeout = timeout

    async def bounds(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        if not partitions:
            return {}
        starts = await self._consumer.beginning_offsets(partitions)
        ends = await self._consumer.end_offsets(partitions)
        return {tp: (int(starts[tp]), int(ends[tp])) for tp in partitions}

    async def read(
        self, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, list[StoredRecord]]:
        return await read_ranges(self._consumer, ranges, self._timeout)


@dataclass(frozen=True, slots=True)
class RecoveryPoint:
    """One partition of the origin's replica topic, as the local cluster holds it."""

    topic: str  # the origin's replica topic (orders_REPLICA)
    partition: int
    destination_topic: str  # where its records are copied (orders)
    held_up_to: int | None  # the origin offset after the newest record held here (None: none)
    newest_timestamp_ms: int | None  # that record's timestamp (its producer's, kept by the copy)
    newest_age_s: float | None
    origin_log_end: int | None  # None: the origin did not answer, or lacks the partition
    missing: int | None  # records the origin holds that are not here (None: not known)
    # Records neither holds: the origin's retention removed them before a copy (None: unknown).
    expired: int | None


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """``replicator rpo``: the local cluster's holdings of one origin's replica topics."""

    origin: str
    local: str
    points: tuple[RecoveryPoint, ...]
    origin_error: str | None  # why the origin could not be read

    @property
    def missing(self) -> int | None:
        if self.origin_error is not None:
            return None
        return sum(p.missing or 0 for p in self.points)

    @property
    def expired(self) -> int | None:
        if self.origin_error is not None:
            return None
        return sum(p.expired or 0 for p in self.points)

    @property
    def complete(self) -> bool:
        """The origin answered, and everything it took is here: nothing missing, nothing lost."""
        return self.missing == 0 and self.expired == 0

    @property
    def oldest_newest_age_s(self) -> float | None:
        """The age of the newest record held, over the partitions that hold one: the oldest."""
        ages = [p.newest_age_s for p in self.points if p.newest_age_s is not None]
        return max(ages) if ages else None

    def shown(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "local": self.local,
            "origin_error": self.origin_error,
            "complete": self.complete,
            "missing": self.missing,
            "expired": self.expired,
            "partitions": [asdict(p) for p in self.points],
        }


def still_to_count(
    replica_suffix: str,
    origin_ends: Mapping[TopicPartition, tuple[int, int]],
    newest: Mapping[TopicPartition, Newest | None],
) -> dict[TopicPartition, tuple[int, int]]:
    """The range of each origin partition past what the local cluster holds of it: the records
    there, counted on the origin, are the ones not here."""
    ranges = {}
    for tp, (start, end) in origin_ends.items():
        held = newest.get(TopicPartition(tp.topic[: -len(replica_suffix)], tp.partition))
        ranges[tp] = (max(start, 0 if held is None else held.origin_offset + 1), end)
    return ranges


def recovery_point(
    origin: str,
    local: str,
    replica_suffix: str,
    origin_ends: Mapping[TopicPartition, tuple[int, int]],
    newest: Mapping[TopicPartition, Newest | None],
    not_here: Mapping[TopicPartition, int],
    now_ms: int,
    origin_error: str | None,
) -> RecoveryReport:
    """The report from what was read: ``newest`` per destination partition of the local
    cluster; ``origin_ends`` (log start and end) per partition of the origin's replica topics,
    and ``not_here``, the records counted there past what the local cluster holds."""
    keys = {(tp.topic + replica_suffix, tp.partition) for tp in newest}
    keys |= {(tp.topic, tp.partition) for tp in origin_ends}
    points = []
    for topic, partition in sorted(keys):
        destination = TopicPartition(topic[: -len(replica_suffix)], partition)
        held = newest.get(destination)
        up_to = None if held is None else held.origin_offset + 1
        stamp = None if held is None else held.timestamp_ms
        age = None if stamp is None else max(0.0, (now_ms - stamp) / 1000)
        source = TopicPartition(topic, partition)
        bounds = origin_ends.get(source)
        end = missing = expired = None
        if bounds is not None:
            start, end = bounds
            missing = not_here.get(source, 0)
            expired = 0 if up_to is None else max(0, start - up_to)
        elif origin_error is None:
            missing = expired = 0  # the origin answered without this partition: nothing to copy
        points.append(
            RecoveryPoint(
                topic, partition, destination.topic, up_to, stamp, age, end, missing, expired
            )
        )
    return RecoveryReport(origin, local, tuple(points), origin_error)


def _replica_plan(settings: Settings) -> FeedPlan:
    for plan in feeds_for(settings):
        if plan.name == REPLICA_FEED:
            return plan
    raise ConfigError("REPLICATOR_REPLICA_MODE", "rpo measures the _REPLICA mode, which is off")


async def _origin_ends(
    settings: Settings, origin: str, plan: FeedPlan
) -> tuple[dict[TopicPartition, tuple[int, int]], str | None]:
    """The origin's replica partitions and their bounds, or why they could not be read."""
    client = client_options(settings.clusters[origin], settings)
    try:
        async with asyncio.timeout(_ORIGIN_TIMEOUT_S):
            selection = await topic_selection(client, plan.rules)
            ranges = await snapshot(client, list(selection.replicated))
    except Exception as exc:  # any failure to read it is reported, not raised
        return {}, _origin_failure(settings, origin, exc)
    return {tp: (int(start), int(end)) for tp, (start, end) in ranges.items()}, None


def _origin_failure(settings: Settings, origin: str, exc: Exception) -> str:
    where = settings.clusters[origin].bootstrap_servers
    if isinstance(exc, TimeoutError):
        return f"{origin} does not answer at {where} (no answer within {_ORIGIN_TIMEOUT_S:.0f}s)"
    error = unreachable(exc, settings, origin)
    if isinstance(error, ClusterUnavailable):  # it names the cluster and its address
        return str(error)
    return f"{origin} could not be read at {where}: {said(error)}"


async def _count_on_origin(
    settings: Settings, origin: str, ranges: dict[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, int]:
    """The committed records in each range of the origin (as a leg reads them)."""
    client = client_options(settings.clusters[origin], settings)
    consumer = AIOKafkaConsumer(
        **client,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    try:
        await consumer.start()
        return await count_ranges(consumer, ranges, settings.request_timeout_ms / 1000)
    finally:
        await close_quietly(consumer.stop())


async def _local_newest(
    settings: Settings, origin: str, plan: FeedPlan, also: list[TopicPartition]
) -> dict[TopicPartition, Newest | None]:
    local = settings.local_cluster
    client = client_options(settings.clusters[local], settings)
    suffix = settings.replica_suffix
    timeout = settings.request_timeout_ms / 1000
    selection = await topic_selection(client, plan.rules)
    # earliest: a window below a log start that retention just moved reads from the new start.
    consumer = AIOKafkaConsumer(**client, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        await consumer.start()
        held = await cluster_partitions(consumer)
        topics = {t[: -len(suffix)] for t in selection.replicated}
        topics |= {tp.topic[: -len(suffix)] for tp in also}
        origins = {
            TopicPartition(topic, p): Tagger(origin, topic + suffix, p)
            for topic in sorted(topics)
            for p in held.get(topic, ())
        }
        return await newest_of_origins(KafkaReadBack(consumer, timeout), origins)
    finally:
        await close_quietly(consumer.stop())


async def measure(settings: Settings, origin: str) -> RecoveryReport:
    """Read both clusters and make the report; a :class:`~replicator.errors.ReplicatorError`
    naming the local cluster if it cannot be read."""
    plan = _replica_plan(settings)
    origin_ends, origin_error = await _origin_ends(settings, origin, plan)
    try:
        newest = await _local_newest(settings, origin, plan, list(origin_ends))
    except Exception as exc:
        raise unreachable(exc, settings, settings.local_cluster) from exc
    not_here: dict[TopicPartition, int] = {}
    if origin_error is None:
        ranges = still_to_count(settings.replica_suffix, origin_ends, newest)
        try:
            not_here = await _count_on_origin(settings, origin, ranges)
        except Exception as exc:  # the origin went away between the two reads
            origin_ends, origin_error = {}, _origin_failure(settings, origin, exc)
    now_ms = int(time.time() * 1000)
    return recovery_point(
        origin,
        settings.local_cluster,
        settings.replica_suffix,
        origin_ends,
        newest,
        not_here,
        now_ms,
        origin_error,
    )


def rpo(settings: Settings, origin: str, as_json: bool, echo: Callable[[str], None] = print) -> int:
    """Print the report; 0 when the origin answered and the local cluster holds every record it
    took, 1 otherwise (records not here yet or lost, the origin unanswered, the local cluster
    unread)."""
    try:
        report = asyncio.run(measure(settings, origin))
    except Exception as raised:
        message = f"failed: {said(raised)}"
        if as_json:
            print(json.dumps({"origin": origin, "error": message}))
        else:
            echo(message)
        return 1
    if as_json:
        print(json.dumps(report.shown()))
    else:
        _print(report)
    return 0 if report.complete else 1


def _clock_time(stamp_ms: int | None) -> str:
    if stamp_ms is None:
        return "-"
    return datetime.fromtimestamp(stamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _print(report: RecoveryReport) -> None:
    origin, local = report.origin, report.local
    table = Table(title=f"what {local} holds of {origin}'s replica topics")
    for column in (
        "topic",
        "partition",
        "held up to",
        "newest written",
        "age",
        "log end",
        "not here",
        "lost",
    ):
        table.add_column(column, justify="right")
    for p in report.points:
        table.add_row(
            p.topic,
            str(p.partition),
            "-" if p.held_up_to is None else str(p.held_up_to),
            _clock_time(p.newest_timestamp_ms),
            "-" if p.newest_age_s is None else f"{p.newest_age_s:.1f} s",
            "?" if p.origin_log_end is None else str(p.origin_log_end),
            "?" if p.missing is None else str(p.missing),
            "?" if p.expired is None else str(p.expired),
        )
    print_table(Console(), table)
    print(verdict(report))


def verdict(report: RecoveryReport) -> str:
    """The report's last line: what is known of the records of the origin not here."""
    origin, local = report.origin, report.local
    age = report.oldest_newest_age_s
    lost = ""
    if report.expired:
        lost = (
            f" {report.expired} records are lost: {origin}'s retention removed them before "
            f"{local} had them."
        )
    if report.origin_error is not None:
        newest = "" if age is None else f"; the newest record held is at most {age:.1f} s old"
        return (
            f"{report.origin_error}. {local} holds {origin}'s records below 'held up to'; what "
            f"{origin} took after them is not here{newest}. Run this again once {origin} "
            "answers for the exact count."
        )
    missing = report.missing or 0
    if not missing:
        if not report.expired:
            return f"{origin} answered: {local} holds every record of its replica topics."
        return f"{origin} answered: {local} holds every record it still has.{lost}"
    behind = sum(1 for p in report.points if p.missing)
    return (
        f"{origin} answered: {missing} records of its replica topics ({behind} partitions) are "
        f"not in {local} yet; {origin}'s replicator copies them when it runs.{lost}"
    )
