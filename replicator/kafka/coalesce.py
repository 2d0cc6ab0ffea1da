"""Coalescing: many concurrent requests for one key each, answered by one request for all.

Start-up asks the same questions once per partition (is this destination topic ready? where was
this partition's mark saved? does the producer know this topic?), each from its own partition's
task. Asked one by one, N partitions cost N requests, each of a size that grows with the cluster.
A :class:`Coalescer` gathers the keys asked for while a request is being made, and asks for all
of them in the next one: N partitions cost a handful of requests (a round per wave of callers,
at most ``max_batch`` keys each).

No background task: the caller that finds no round running makes the next round for everyone
waiting, in its own task (:class:`Rounds`); the others wait for their answer, or for the round
to end if it did not include them. Every caller a round answered goes on at once (they do not
queue behind a lock, which would release them one by one and spread the next wave of questions
over many small rounds). A round interrupted (its caller was cancelled) leaves its keys to the
next caller. A failure of the whole round fails each key's
caller with its own copy of the error (one exception raised in many tasks would collect all
their tracebacks), so each caller's own retry decides what happens next.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from replicator.errors import Unanswered

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Answers per key: a value, or the error for that key alone.
Answers = Mapping[K, "V | BaseException"]


_JOIN_STEPS = 3  # loop steps without a new question before a round starts


def _retrieved(future: asyncio.Future[Any]) -> None:
    # An answer nobody waits for any more (its caller was cancelled) is not an error to report.
    if not future.cancelled():
        future.exception()


class Rounds:
    """One round at a time, made by whichever waiting caller comes first.

    The others wait for the end of the running round (each on a future of its own, woken in one
    pass when the round ends: thousands of callers cost no more than thousands of wake-ups),
    then return if it answered them, or make the next round.
    """

    def __init__(self) -> None:
        self._running = False
        self._waiting: list[asyncio.Future[None]] = []
        self.count = 0  # rounds made (a request count, for tests and benchmarks)

    async def until(
        self,
        answered: asyncio.Future[Any],
        make_round: Callable[[], Awaitable[None]],
        waiting: Callable[[], int] = lambda: 0,
    ) -> None:
        """Return once ``answered`` is done, making rounds while none is running; before a
        round, callers keep joining while ``waiting()`` (the questions pending) grows."""
        while not answered.done():
            if self._running:
                ended = asyncio.get_running_loop().create_future()
                self._waiting.append(ended)
                await ended
                continue
            self._running = True
            try:
                await self._gather(waiting)
                self.count += 1
                await make_round()
            finally:
                self._running = False
                ended_round, self._waiting = self._waiting, []
                for ended in ended_round:
                    if not ended.done():
                        ended.set_result(None)

    @staticmethod
    async def _gather(waiting: Callable[[], int]) -> None:
        # Callers answered by the previous round wake a few loop steps after it (their waits
        # resolve through callbacks): let them ask before this round takes the questions.
        while True:
            before = waiting()
            for _ in range(_JOIN_STEPS):
                await asyncio.sleep(0)
            if waiting() == before:
                return


class Coalescer(Generic[K, V]):
    """Answers ``get(key)`` calls by rounds of ``fetch_many(keys)``, one round at a time."""

    def __init__(
        self, fetch_many: Callable[[list[K]], Awaitable[Answers[K, V]]], max_batch: int = 1000
    ) -> None:
        self._fetch_many = fetch_many
        self._max_batch = max_batch
        self._pending: dict[K, asyncio.Future[V]] = {}
        self._rounds = Rounds()

    @property
    def rounds(self) -> int:
        """Rounds made so far (each one request, or one per broker, for many keys)."""
        return self._rounds.count

    async def get(self, key: K) -> V:
        """The answer for ``key``, from the next round that asks for it."""
        future = self._pending.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieved)
            self._pending[key] = future
        await self._rounds.until(future, self._make_round, lambda: len(self._pending))
        error = future.exception()
        if error is not None:
            raise _copy(error)  # several callers may ask for one key: each its own instance
        return future.result()

    async def _make_round(self) -> None:
        keys = list(self._pending)[: self._max_batch]
        batch = {key: self._pending.pop(key) for key in keys}
        try:
            answers = await self._fetch_many(keys)
        except asyncio.CancelledError:
            for key, future in batch.items():  # left to the next caller
                if not future.done():
                    self._pending.setdefault(key, future)
            raise
        except Exception as exc:
            for future in batch.values():
                if not future.done():
                    future.set_exception(exc)
            return
        for key, future in batch.items():
            if not future.done():
                _settle(future, key, answers)


def _settle(future: asyncio.Future[V], key: K, answers: Answers[K, V]) -> None:
    """Give ``future`` the answer for ``key``: its value, its error, or :class:`Unanswered`."""
    if key not in answers:
        future.set_exception(Unanswered(f"no answer for {key!r}"))
        return
    answer = answers[key]
    if isinstance(answer, BaseException):
        future.set_exception(answer)
    else:
        future.set_result(answer)


def _copy(exc: BaseException) -> BaseException:
    """A fresh instance of ``exc`` for one caller (same type, message and cause), its traceback
    going on into where the round's request raised it (each raise adds its frames in front of
    that shared tail without changing it), so a fault names its site
    (:func:`replicator.kafka.translation.fault`)."""
    try:
        clone = copy.copy(exc)
    except Exception:  # an exception that cannot be copied is raised as it is
        return exc
    clone.__cause__ = exc.__cause__
    clone.__traceback__ = exc.__traceback__
    return clone
