"""One fetch round, shared by the shared feed and every leg's catch-up fetch (:class:`FetchRound`).

A round is one fetch of a :class:`~replicator.kafka.fetching.FetchSource`, retried until it is
answered or stop comes, and what it brought handed to its loop (a :class:`RoundReader`) in one
order, after every answer: positions found outside the source log first (the fetch had no
records then), then the records of each partition, then the positions the consumer moved past
records it never hands over (transaction markers, aborted records), then the records it stopped
at, undecodable (their partitions paused). Between rounds the broker's wait for data lengthens
while fetches come back empty (:class:`~replicator.lifecycle.IdleWait`). Each round records when
the source last answered and the last failure, for health and ``/status``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiokafka import TopicPartition

from replicator import clock
from replicator.errors import InstanceFenced, ReplicatorError
from replicator.kafka.decoding import Poison
from replicator.kafka.fetching import Fetched, FetchSource
from replicator.kafka.retry import retrying
from replicator.kafka.translation import translate
from replicator.lifecycle import IdleWait
from replicator.model.records import Chunk

FETCH_TIMEOUT_MS = 200


class RoundReader(Protocol):
    """What a fetch loop does with what a round brought."""

    async def out_of_range(self, positions: dict[TopicPartition, int]) -> None:
        """The fetch found these positions outside the source log (and had no records)."""
        ...

    def take(self, tp: TopicPartition, records: Chunk, fetched_ms: int) -> None:
        """``records`` of ``tp``, in offset order, fetched at ``fetched_ms`` (wall clock)."""
        ...

    def reading(self) -> Iterable[tuple[TopicPartition, int]]:
        """The partitions to look at for a position moved past records never handed over,
        each with where the loop stands in it (asked after :meth:`take`)."""
        ...

    def pass_over(self, tp: TopicPartition, position: int) -> None:
        """The consumer moved ``tp`` to ``position``, past where the loop stands."""
        ...

    def undecodable(self, poison: Poison) -> None:
        """The fetch stopped at a record it cannot decode (its partition is paused)."""
        ...


class FetchRound:
    """Rounds of one fetch loop over its source; see the module docstring."""

    def __init__(
        self,
        source: Callable[[], FetchSource],
        reader: RoundReader,
        *,
        what: str,
        failure: str,
        log: Any,
        denied: Callable[[BaseException], ReplicatorError] = translate,
    ) -> None:
        """``source``: the loop's consumer (started before the first round); ``what`` and
        ``failure`` name a failed fetch in the retry's log and in :attr:`last_error`;
        ``denied`` says a failure in the loop's terms (an ACL denial naming what it refused,
        :func:`~replicator.kafka.translation.denial`)."""
        self._source = source
        self._denied = denied
        self._reader = reader
        self._what = what
        self._failure = failure
        self._log = log
        self.last_poll = clock.monotonic()  # when the source last answered a fetch
        self.last_error: str | None = None

    async def run(self, stop: asyncio.Event, idle: IdleWait | None = None) -> bool | None:
        """One round: whether the fetch had records; ``None`` if stop came first (what the
        fetch brought then is not handed over)."""
        fetched = await retrying(
            self._fetch,
            stop=stop,
            what=self._what,
            log=self._log,
            on_error=self._failed,
            # Another process took this replica's identity: it must stop, not fetch on.
            persistent=lambda error: not isinstance(error, InstanceFenced),
        )
        if fetched is None or stop.is_set():
            return None
        self.last_poll = clock.monotonic()
        if idle is not None:
            wait = idle.after(bool(fetched.records), self.last_poll)
            if wait is not None:
                self._source().set_wait(wait)
        self._hand_over(fetched)
        return bool(fetched.records)

    async def _fetch(self) -> Fetched:
        try:
            fetched = await self._source().fetch(FETCH_TIMEOUT_MS)
        except Exception as exc:
            raise self._denied(exc) from exc
        if fetched.out_of_range:
            await self._reader.out_of_range(fetched.out_of_range)
        else:
            self.last_error = None
        return fetched

    def _hand_over(self, fetched: Fetched) -> None:
        source, reader = self._source(), self._reader
        fetched_ms = int(clock.wall() * 1000)
        for tp, records in fetched.records.items():
            if records:
                reader.take(tp, records, fetched_ms)
        for tp, at in list(reader.reading()):
            position = source.position_after(tp)
            if position is not None and position > at:
                reader.pass_over(tp, position)
        for poison in source.poisoned():
            if poison.tp in source.assignment():
                source.pause(poison.tp)
            reader.undecodable(poison)

    def _failed(self, error: ReplicatorError) -> None:
        self.last_error = f"{self._failure}: {error}"
