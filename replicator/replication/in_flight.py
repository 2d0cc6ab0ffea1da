"""What one partition on one leg has handed to its destination and not yet had answered.

Owned by the :class:`~replicator.replication.partition.LegPartition` (its ``in_flight``), written
by its sender, read by health and stall reports. Three facts, each kept once:

- the source ranges handed over and not yet acknowledged, with when (oldest first): how long the
  destination has kept the partition waiting (``/status``, the stall alert);
- the batches the producer holds, by their answer's future, with their epoch and record count: a
  drain or a rewind waits for them, a release counts what may land twice;
- per destination partition, where the last acknowledged batch ended: a batch written below it
  means the destination's log was replaced (topic deleted and created again, a cluster restored
  empty). The end, not the base: a log replaced after a single batch takes the next one at the
  same base.
"""

from __future__ import annotations

import asyncio
from typing import Any


class InFlight:
    """One partition's batches between the producer and the destination's answer."""

    __slots__ = ("_batches", "_ends", "_ranges")

    def __init__(self) -> None:
        # Few: lists and dicts, not deques (a deque allocates 700 bytes even empty).
        self._ranges: list[tuple[int, float]] = []  # (first source offset, handed over at)
        self._batches: dict[asyncio.Future[Any], tuple[int, int]] = {}  # -> (epoch, records)
        self._ends: dict[int, int] = {}  # destination partition -> end of its last batch

    # -- source ranges --------------------------------------------------------------------------

    def range_sent(self, first: int, now: float) -> None:
        """The range starting at source offset ``first`` was handed over at ``now``."""
        self._ranges.append((first, now))

    def acknowledged_below(self, committable: int) -> None:
        """Every range starting below ``committable`` is acknowledged."""
        done = 0
        while done < len(self._ranges) and self._ranges[done][0] < committable:
            done += 1
        del self._ranges[:done]

    def forget_ranges(self) -> None:
        """Nothing sent counts any more (rewound, halted, restarted)."""
        self._ranges.clear()

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest range handed over has waited for acknowledgement."""
        return now - self._ranges[0][1] if self._ranges else 0.0

    # -- batches --------------------------------------------------------------------------------

    def batch_sent(self, answer: asyncio.Future[Any], epoch: int, records: int) -> None:
        """A batch of ``records`` of ``epoch`` awaits ``answer``."""
        self._batches[answer] = (epoch, records)

    def batch_answered(self, answer: asyncio.Future[Any]) -> None:
        self._batches.pop(answer, None)

    def unanswered(self, epoch: int | None = None) -> list[asyncio.Future[Any]]:
        """The batches still unanswered (of ``epoch`` only, if given)."""
        return [
            answer
            for answer, (sent_in, _) in self._batches.items()
            if not answer.done() and (epoch is None or sent_in == epoch)
        ]

    def records(self, answers: set[asyncio.Future[Any]]) -> int:
        """How many records the batches of ``answers`` hold."""
        return sum(self._batches.get(answer, (0, 0))[1] for answer in answers)

    async def drain(self, epoch: int, timeout: float) -> tuple[int, int]:
        """Wait up to ``timeout`` for the batches of ``epoch``; how many are still unanswered,
        and the records they hold."""
        pending = self.unanswered(epoch)
        if not pending:
            return 0, 0
        _, still = await asyncio.wait(pending, timeout=timeout)
        return len(still), self.records(still)

    async def settled(self, closed: asyncio.Event) -> bool:
        """Wait until every batch sent is answered; ``False`` if ``closed`` is set first."""
        pending = self.unanswered()
        if not pending:
            return True
        answered: asyncio.Future[Any] = asyncio.gather(*pending, return_exceptions=True)
        closing: asyncio.Future[Any] = asyncio.ensure_future(closed.wait())
        try:
            await asyncio.wait({answered, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        return answered.done()

    def answers(self) -> list[asyncio.Future[Any]]:
        """Every batch's answer, settled or not, that is still tracked."""
        return list(self._batches)

    # -- destination log ends -------------------------------------------------------------------

    def written(self, partition: int, base: int, records: int) -> bool:
        """A batch of ``records`` was written at ``base`` of destination ``partition``;
        ``True`` when that is below where the last one ended (the log was replaced)."""
        replaced = base < self._ends.get(partition, 0)
        self._ends[partition] = base + records
        return replaced

    def forget_written(self) -> None:
        """The destination's logs are read again (a replay): no end is known."""
        self._ends.clear()


class Outstanding:
    """The batches of one source range still unanswered (placed by key, one per destination
    partition it touches), and the destination mark to give the range once all are acknowledged
    (only when a single batch holds the whole range)."""

    __slots__ = ("_left", "mark")

    def __init__(self, batches: int) -> None:
        self._left = batches
        self.mark: int | None = None

    def done(self, mark: int | None) -> bool:
        """One batch was acknowledged (written before ``mark``); ``True`` when it was the last."""
        self._left -= 1
        if mark is not None:
            self.mark = mark
        return self._left == 0
