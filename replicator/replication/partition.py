"""One source partition on one leg: where it stands, who feeds it, what is queued and acknowledged.

Modelled on aiokafka's ``TopicPartitionState``: a :class:`LegPartition` is the single owner of the
state of one source partition for one destination, and its named transitions are the only way
that state changes. Nothing here does I/O; the shared feed, the leg's catch-up fetch, the sender
and the committer act on it and wait on the events it exposes.

::

    STARTING  --resumed()---> STARTING (at the position the destination's tail gives)
    STARTING  --resumed_placed()-> STARTING (placed by key: skipping what the destination holds)
    any open  --restart()---> STARTING (a batch of unknown outcome: resume from the tail again)
    STARTING  --prepared()--> ATTACHED --detach()--> ALONE --attach()--> ATTACHED
    any open  --rewind()----> REPLAYING --attach()--> ATTACHED
    any open  --halt()------> HALTED  (blocked or failed)
    any       --stop()------> STOPPED (released; a halted partition stays HALTED)

- ``STARTING``: the destination topic is being prepared (its ``max.message.bytes`` decides the
  batches) and its tail read (:mod:`replicator.replication.resume`: the position moves past what the
  destination already holds of this origin); nothing is fed yet.
- ``ATTACHED``: the shared feed builds this partition's batches together with the other legs'
  (a partition placed by key gets the feed's records and builds its own batches as they enter
  its queue, as records of the catch-up fetch are: every queued :class:`Work` is built).
- ``ALONE``: the leg's catch-up fetch feeds it (it is behind the shared feed, or was too slow
  for it); it attaches again when a chunk of the feed continues exactly where it stands, or
  when it is ahead of the feed (it then waits for the feed).
- ``REPLAYING``: like ``ALONE``, after :meth:`LegPartition.rewind` moved the position back (the
  destination's log was replaced, or the source log was): in-flight acknowledgements of the
  abandoned position are ignored, and the new position is committed.
- ``HALTED``: blocked (the destination topic cannot hold it) or failed (refused for good);
  nothing is queued, fed or committed past the problem until the partition is assigned again.
- ``STOPPED``: released by a rebalance or shutdown.

:attr:`LegPartition.position` is the next source offset this destination needs; input is only
accepted if it continues from there (no gap, no repeat). Queries (``fit``, ``has_room``,
``status``...) never change state. The resume position of a newly assigned partition is decided
in one place, :func:`resume_position`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition

from replicator import clock
from replicator.lifecycle import PartitionEvent
from replicator.model.batching import (
    BatchMaker,
    OutboundBatch,
    Placement,
    Target,
    build,
    build_placed,
)
from replicator.model.offsets import OffsetTracker
from replicator.model.provenance import Tagger
from replicator.model.records import Chunk, payload_size
from replicator.replication.in_flight import InFlight
from replicator.replication.resume import Tail, resume_after
from replicator.replication.states import FED_ALONE, OPEN, Fit, Halt, Mode, Work


class LegPartition:
    """The state of one source partition on one leg; see the module docstring."""

    # One per assigned partition and leg: slots keep each instance small (no attribute dict).
    __slots__ = (
        "_commit_due",
        "_full",
        "_max_bytes",
        "_max_records",
        "_queue",
        "_queued_bytes",
        "_queued_records",
        "_watchers",
        "closed",
        "committed_start",
        "dead_lettered",
        "destination_mark",
        "epoch",
        "halt_kind",
        "in_flight",
        "last_error",
        "mode",
        "new_batch",
        "placement",
        "poisoned",
        "position",
        "skipped_at_resume",
        "tagger",
        "target_topic",
        "tp",
        "tracker",
        "wakeup",
    )

    def __init__(
        self,
        tp: TopicPartition,
        target_topic: str,
        source: str,
        position: int | None,
        max_records: int,
        max_bytes: int,
        home: str | None = None,
        home_marks: tuple[str, ...] = (),
        committed: bool = False,
    ) -> None:
        self.tp = tp
        self.target_topic = target_topic
        # The offset the leg had committed when the partition was assigned (``committed``:
        # ``position`` is one; ``None``: the leg never committed it, it starts by policy).
        self.committed_start = position if committed else None
        self.mode = Mode.STARTING
        self.halt_kind: Halt | None = None
        self.position = position
        self.tracker: OffsetTracker | None = None
        self.last_error: str | None = None
        self.epoch = 0  # bumped by rewind(): work and acknowledgements of older epochs are void
        self.tagger = Tagger(source, tp.topic, tp.partition, home, home_marks)
        self.new_batch: BatchMaker | None = None  # set by prepared()
        # Set by prepared() when records are placed by key (the destination's partition count
        # differs and the flow does not preserve partition numbers).
        self.placement: Placement | None = None
        self.dead_lettered = 0
        # A destination offset below which every record before the position was written (set
        # by a resume or restart): a resume reads the destination from there.
        self.destination_mark: int | None = None
        self.skipped_at_resume = 0  # records the destination already held when it started
        # The record at the position cannot be decoded: nothing more is fed (see undecodable).
        self.poisoned = False
        # Set whenever work is queued or the mode changes: the sender waits on it.
        self.wakeup = PartitionEvent()
        # The queue was found full: the watchers are told when it has room again.
        self._full = False
        # Set when the partition leaves the open modes (halted or stopped).
        self.closed = PartitionEvent()
        # Oldest first; a list, not a deque: a deque allocates 700 bytes even empty (8 MB at
        # 6,000 partitions on two legs) and this queue holds a fetch or two.
        self._queue: list[Work] = []
        self._queued_records = 0
        self._queued_bytes = 0
        # Called on every change the feed or the catch-up fetch may act on (a mode change, room
        # freed, a position moved), so they look at changed partitions only, never poll them all.
        self._watchers: list[Callable[[LegPartition], None]] = []
        # Called when the tracker has something to commit (see :meth:`owe_commits_to`).
        self._commit_due: Callable[[LegPartition], None] | None = None
        self._max_records = max_records
        self._max_bytes = max_bytes
        # What was handed to the destination and not yet answered (written by the sender).
        self.in_flight = InFlight()

    def watch(self, watcher: Callable[[LegPartition], None]) -> None:
        """Call ``watcher(self)`` after every transition (it must not change this partition)."""
        if watcher not in self._watchers:
            self._watchers.append(watcher)

    def owe_commits_to(self, due: Callable[[LegPartition], None]) -> None:
        """Call ``due(self)`` whenever the tracker has an offset or a mark to commit (an
        acknowledgement moved it, a new tracker must commit its start, a mark was raised), so
        the committer looks at those partitions only, never walks them all."""
        self._commit_due = due
        if self.tracker is not None and self.tracker.needs_commit:
            due(self)

    # -- queries --------------------------------------------------------------------------------

    @property
    def open(self) -> bool:
        return self.mode in OPEN

    @property
    def halted(self) -> bool:
        return self.mode is Mode.HALTED

    @property
    def attached(self) -> bool:
        return self.mode is Mode.ATTACHED

    @property
    def fed_alone(self) -> bool:
        """Whether the leg's catch-up fetch must feed this partition (when it has room)."""
        return self.mode in FED_ALONE and self.position is not None and not self.poisoned

    @property
    def has_room(self) -> bool:
        return self._queued_records < self._max_records and self._queued_bytes < self._max_bytes

    @property
    def queued_records(self) -> int:
        return self._queued_records

    @property
    def state(self) -> str:
        """What ``/status`` shows: the mode, or the kind of halt."""
        if self.halt_kind is not None:
            return self.halt_kind.value
        return self.mode.value

    def fit(self, start: int, end: int) -> Fit:
        """What the shared feed's chunk ``[start, end)`` means for this partition (no change).

        A partition ahead of the feed (after a restart, or a catch-up fetch that outran it)
        waits for the feed rather than fetch alone: ``AHEAD`` (the feed attaches it).
        """
        if self.poisoned:
            return Fit.NONE
        if self.mode is Mode.ATTACHED:
            position = start if self.position is None else self.position
            if position > end:
                return Fit.AHEAD
            return Fit.JOIN if position >= start else Fit.BEHIND
        if self.mode in FED_ALONE and self.has_room and self.position is not None:
            if self.position > end:
                return Fit.AHEAD
            return Fit.JOIN if self.position >= start else Fit.NONE
        return Fit.NONE

    def oldest_unacked_age(self, now: float) -> float:
        """Seconds the oldest batch handed to the destination has waited for acknowledgement."""
        return self.in_flight.oldest_age(now)

    # -- transitions: lifecycle -----------------------------------------------------------------

    def prepared(self, new_batch: BatchMaker, placement: Placement | None = None) -> None:
        """STARTING -> ATTACHED: the destination topic is ready; batches are made by ``new_batch``
        (placed by key when ``placement`` is given).

        The shared feed serves it from where it stands (it detaches it if the feed is already
        past that position, and the catch-up fetch takes over). In another open mode (the topic
        was prepared again, after a replay) only the batch factory changes.
        """
        if not self.open:
            return
        self.new_batch = new_batch
        self.placement = placement
        self.last_error = None if self.mode is Mode.STARTING else self.last_error
        if self.mode is Mode.STARTING:
            self._enter(Mode.ATTACHED)

    def resumed(self, tail: Tail, log_start: int | None = None, mark_saved: bool = True) -> int:
        """STARTING: continue after what the destination already holds of this origin.

        The tracker starts there, with the destination's log end as its mark, and the new
        position is committed at the next commit if it moved, the mark if none was saved
        (``mark_saved``): a committed partition always has a mark. Returns how many records the
        destination already held past the position (skipped, never sent again); negative when
        the position moved back (the source log was replaced after the last commit and replayed
        from ``log_start``, the source log start: :func:`resume_after`).
        """
        if self.mode is not Mode.STARTING:
            return 0
        position = resume_after(self.position, tail, log_start)
        moved = position != self.position
        skipped = 0
        if position is not None and self.position is not None:
            skipped = position - self.position
        self.position = position
        if position is not None:
            unsaved = self.tracker is not None and self.tracker.needs_commit  # after restart()
            self._track(
                OffsetTracker(
                    position,
                    must_commit=moved or unsaved,
                    destination_mark=tail.log_end,
                    mark_saved=mark_saved,
                )
            )
        self.destination_mark = tail.log_end
        self.skipped_at_resume = max(skipped, 0)
        return skipped

    def resumed_placed(self, written: frozenset[int]) -> None:
        """STARTING, placed by key: stay at the position; the records at or after it that the
        destination already holds (``written``, by source offset) are skipped as they come."""
        if self.mode is not Mode.STARTING or self.position is None:
            return
        unsaved = self.tracker is not None and self.tracker.needs_commit  # after restart()
        self._track(OffsetTracker(self.position, must_commit=unsaved))
        self.destination_mark = None
        self.skipped_at_resume = len(written)

    def restart(self, note: str) -> bool:
        """Any open mode but STARTING -> STARTING: a batch's outcome is unknown (sent, never
        answered), so where this partition stands must be read from the destination again.

        The position goes back to the acknowledged prefix; queued work and acknowledgements
        still to come for the abandoned epoch no longer count. ``False`` if not open.
        """
        if not self.open or self.mode is Mode.STARTING:
            return False
        self.epoch += 1
        self._clear_queue()
        self.in_flight.forget_ranges()
        old = self.tracker
        if old is not None:
            self.position = old.committable
            self.destination_mark = old.destination_mark
            self._track(
                OffsetTracker(
                    old.committable,
                    must_commit=old.committed != old.committable,
                    destination_mark=old.destination_mark,
                )
            )
        self.last_error = note
        self._enter(Mode.STARTING)
        return True

    def replay_from_mark(self, destination_end: int) -> None:
        """After :meth:`rewind`: the replaced destination's log ended at ``destination_end``
        when the replay began; a resume never reads below it (that came before the replay)."""
        if self.open and self.tracker is not None:
            self._track(
                OffsetTracker(
                    self.tracker.committable, must_commit=True, destination_mark=destination_end
                )
            )
            self.destination_mark = destination_end

    def place(self, offset: int) -> None:
        """Start at ``offset`` (where the shared feed starts) if no position was known."""
        if self.position is None:
            self.position = offset

    def attach(self) -> None:
        """ALONE/REPLAYING -> ATTACHED: the shared feed continues where this partition stands."""
        if self.mode in FED_ALONE:
            self._enter(Mode.ATTACHED)

    def detach(self) -> None:
        """ATTACHED -> ALONE: too slow for the shared feed, or behind it."""
        if self.mode is Mode.ATTACHED:
            self._enter(Mode.ALONE)

    def halt(self, reason: str, kind: Halt = Halt.FAILED) -> bool:
        """Any open mode -> HALTED; ``False`` if it was not open."""
        if not self.open:
            return False
        self.halt_kind = kind
        self.last_error = reason
        self.in_flight.forget_ranges()  # nothing past the problem is committed: no stall to report
        self._clear_queue()
        self._enter(Mode.HALTED)
        self.closed.set()
        return True

    def stop(self) -> None:
        """Any mode but HALTED -> STOPPED: released; nothing more is queued or sent."""
        self._clear_queue()
        if self.mode is not Mode.HALTED:
            self._enter(Mode.STOPPED)
        self.closed.set()

    def rewind(self, offset: int, note: str) -> None:
        """Any open mode but STARTING -> REPLAYING at ``offset``, which is committed next.

        What is queued is dropped, and acknowledgements still to come for batches of the old
        position no longer count (the epoch changes).
        """
        if not self.open:
            return
        self.epoch += 1
        self._clear_queue()
        self.in_flight.forget_ranges()
        self.position = offset
        if self.placement is not None:
            # What a resume found written belongs to the old log, not to records coming again.
            self.placement = Placement(self.placement.partitions)
        self._track(OffsetTracker(offset, must_commit=True))
        self.last_error = note
        if self.mode is not Mode.STARTING:
            self._enter(Mode.REPLAYING)

    def skip_to(self, offset: int, note: str) -> None:
        """Continue at ``offset``: the source no longer holds the records before it.

        The gap is queued as an empty range, so it is committed in order, after what is queued
        and in flight before it.
        """
        if not self.open or (self.position is not None and offset < self.position):
            return  # released, or not a skip forward (rewind() moves a position back)
        if self.position is not None and offset > self.position:
            gap = OutboundBatch(None, self.position, offset, 0, 0, 0)
            self._enqueue(Work(0, 0, [gap], self.epoch))
        self.position = offset
        self.last_error = note
        self._changed()

    def pass_over(self, start: int, offset: int) -> None:
        """The source holds nothing to copy in ``[start, offset)``: offsets the client never
        hands over (a transaction's commit or abort marker, an aborted transaction's records,
        read ``read_committed``). Only from :attr:`position` (``start``); queued as an empty
        range, so the committed offset moves past them in order, after what is queued and in
        flight, as a Kafka consumer's position does (lag 0 after a transaction's marker)."""
        if not self.open or self.poisoned or self.position != start or offset <= start:
            return
        gap = OutboundBatch(None, start, offset, 0, 0, 0)
        self._enqueue(Work(0, 0, [gap], self.epoch))
        self.position = offset
        self._changed()

    def report(self, problem: str) -> None:
        """Record a problem the sender is retrying through (shown as ``last_error``)."""
        self.last_error = problem

    def parked(self, records: int, note: str) -> None:
        """``records`` too large for the destination were parked in the dead-letter topic."""
        self.dead_lettered += records
        self.last_error = note

    # -- transitions: input ---------------------------------------------------------------------

    def target(self) -> Target:
        """Where this partition's records start in the chunk the feed is building."""
        assert self.position is not None and self.new_batch is not None
        return Target(self.position, self.new_batch)

    def take_built(self, target: Target, end: int) -> None:
        """Queue the batches the shared feed built for this partition (after ``fit`` said JOIN)."""
        if self.mode in FED_ALONE:
            self._enter(Mode.ATTACHED)
        records = sum(b.count for b in target.batches)
        size = sum(b.size for b in target.batches)
        self._enqueue(Work(records, size, target.batches, self.epoch, target.marked))
        self.position = end

    def take_chunk(self, records: Chunk, end: int, fetched_ms: int) -> None:
        """Queue a chunk of the shared feed (after ``fit`` said JOIN) for a partition placed by
        key: its batches are its own (one per destination partition), unlike every other leg's."""
        assert self.position is not None
        if self.mode in FED_ALONE:
            self._enter(Mode.ATTACHED)
        self._enqueue(self._built(records, end, fetched_ms))
        self.position = end

    def take_fetched(self, records: Chunk, start: int, end: int, fetched_ms: int) -> bool:
        """Queue records the catch-up fetch read from ``start``; ``False``: fetch again from
        :attr:`position` (a gap or a repeat, refused) or stop fetching (not fed alone, full)."""
        if self.mode not in FED_ALONE or self.position is None:
            return False
        if start > self.position:
            return False  # a gap: fetch again from the position
        if end <= self.position:
            return self.has_room  # already had all of it
        self._enqueue(self._built(records, end, fetched_ms))
        self.position = end
        return self.has_room

    def undecodable(self, offset: int, reason: str) -> bool:
        """The record at ``offset`` cannot be decoded: nothing more is fed; once what is queued
        before it is handed over, the sender halts the partition with ``reason``. ``False`` if
        this partition is not open or not there (it reaches the record by its own fetch)."""
        if not self.open or self.poisoned or self.position != offset:
            return False
        self.poisoned = True
        self._enqueue(Work(0, 0, [], self.epoch, start=offset, poison=reason))
        self._changed()
        return True

    # -- transitions: output (the sender) -------------------------------------------------------

    def next_work(self) -> Work | None:
        """The oldest queued work, or ``None``; it keeps its room until :meth:`handed_over`."""
        if not self._queue or not self.open:
            return None
        return self._queue.pop(0)

    def handed_over(self, work: Work) -> None:
        """``work`` was given to the producer (or skipped): its room is free again."""
        if work.epoch != self.epoch or not self.open:
            return  # counted out when rewind(), halt() or stop() cleared the queue
        self._queued_records -= work.records
        self._queued_bytes -= work.size
        if self._full and self.has_room:
            self._full = False
            self._changed()

    def sending(self, epoch: int, first: int, end: int) -> OffsetTracker | None:
        """A batch covering ``[first, end)`` goes out; the tracker that will acknowledge it.

        ``None`` when the batch belongs to an abandoned epoch (it must not be sent).
        """
        if epoch != self.epoch or not self.open:
            return None
        if self.tracker is None:
            self.tracker = OffsetTracker(first)
        self.tracker.track(first, end)
        self.in_flight.range_sent(first, clock.monotonic())
        return self.tracker

    def acknowledged(
        self, tracker: OffsetTracker, first: int, destination_end: int | None = None
    ) -> None:
        """The destination acknowledged the batch starting at ``first`` (of ``tracker``),
        written below its offset ``destination_end`` (``None``: nothing written)."""
        tracker.ack(first, destination_end)
        if tracker is not self.tracker:
            return  # an abandoned epoch
        if self._commit_due is not None and tracker.needs_commit:
            self._commit_due(self)
        self.in_flight.acknowledged_below(tracker.committable)

    def destination_end_seen(self, destination_end: int, last_end: int) -> None:
        """The destination's log end was ``destination_end`` while nothing was in flight and
        the tracker's last range ended at ``last_end``: its mark may rise (saved at the next
        commit), so a resume reads less of what others wrote meanwhile."""
        tracker = self.tracker
        if tracker is None:
            return
        tracker.refresh_mark(destination_end, last_end)
        if self._commit_due is not None and tracker.needs_commit:
            self._commit_due(self)

    def stalled(self, now: float, after: float) -> bool:
        """Whether the destination has not acknowledged a batch for ``after`` seconds."""
        return self.open and self.oldest_unacked_age(now) > after

    # -- internals ------------------------------------------------------------------------------

    def _built(self, records: Chunk, end: int, fetched_ms: int) -> Work:
        """The records from the position to ``end`` as batches for the destination (placed by
        key when the partition is: :func:`batching.build_placed`)."""
        assert self.position is not None and self.new_batch is not None
        start, tagger, new_batch = self.position, self.tagger, self.new_batch
        records_in, size = len(records), payload_size(records)
        if self.placement is not None:
            placement = self.placement
            placed = build_placed(records, start, end, tagger, placement, new_batch, fetched_ms)
            return Work(
                records_in, size, placed.batches, self.epoch, placed.marked, placed.already_written
            )
        target = Target(start, new_batch)
        build(records, end, tagger, [target], fetched_ms)
        return Work(records_in, size, target.batches, self.epoch, target.marked)

    def _enter(self, mode: Mode) -> None:
        self.mode = mode
        self.wakeup.set()
        self._changed()

    def _track(self, tracker: OffsetTracker) -> None:
        self.tracker = tracker
        if self._commit_due is not None and tracker.needs_commit:
            self._commit_due(self)

    def _changed(self) -> None:
        for watcher in self._watchers:
            watcher(self)

    def _enqueue(self, work: Work) -> None:
        self._queue.append(work)
        self._queued_records += work.records
        self._queued_bytes += work.size
        if not self.has_room:
            self._full = True
        self.wakeup.set()

    def _clear_queue(self) -> None:
        self._queue.clear()
        self._queued_records = 0
        self._queued_bytes = 0
        freed, self._full = self._full, False
        self.wakeup.set()
        if freed:
            self._changed()

    def status(self, now: float, stall_after: float) -> dict[str, Any]:
        tracker = self.tracker
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "target_topic": self.target_topic,
            "state": "stalled" if self.stalled(now, stall_after) else self.state,
            "unacknowledged_seconds": round(self.oldest_unacked_age(now), 1),
            "attached_to_shared_fetch": self.attached,
            "next_offset": self.position,
            "acknowledged_offset": tracker.committable if tracker else None,
            "committed_offset": tracker.committed if tracker else None,
            "queued_records": self._queued_records,
            "dead_lettered_records": self.dead_lettered,
            "skipped_at_resume": self.skipped_at_resume,
            "last_error": self.last_error,
        }
