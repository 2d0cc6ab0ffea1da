"""The service's one retry policy: every connect, fetch and send that may fail goes through here.

:func:`retrying` runs an attempt until it succeeds or the stop event is set; failures are
translated into the error tree (:mod:`replicator.errors`), recorded, logged (the first time, when
it changes, then every 30 s with the attempt count) and followed by a :class:`Backoff` delay
that ends as soon as stop is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from replicator import clock
from replicator.errors import ReplicatorError, Stopped
from replicator.kafka.translation import translate
from replicator.lifecycle import sleep_unless_stopped, unless_stopped

T = TypeVar("T")

REPEAT_LOG_S = 30.0  # the same failure is logged again at most this often


class Reminder:
    """When to say a failure that repeats: the first time, when it changes, then every
    :data:`REPEAT_LOG_S` (not one line per attempt)."""

    def __init__(self) -> None:
        self.said: str | None = None  # the failure said last; None after a success
        self._said_at = 0.0

    def due(self, failure: str) -> bool:
        """Whether to say ``failure`` now (if so, it is taken as said)."""
        now = clock.monotonic()
        if failure == self.said and now - self._said_at < REPEAT_LOG_S:
            return False
        self.said, self._said_at = failure, now
        return True

    def clear(self) -> None:
        """The attempts succeeded: the next failure is said at once."""
        self.said = None


class SharedWarnings:
    """One warning per :data:`REPEAT_LOG_S` for a failure many retries share (every partition of
    a leg preparing its destination while it does not answer: thousands of lines otherwise).
    The first passes; the others are logged at debug and counted, and the next one that passes
    says how many were held back."""

    def __init__(self) -> None:
        self._passed_at: float | None = None
        self._held = 0

    def admit(self) -> int | None:
        """``None``: hold this warning back (counted); else how many were held back before it."""
        now = clock.monotonic()
        if self._passed_at is not None and now - self._passed_at < REPEAT_LOG_S:
            self._held += 1
            return None
        held, self._held, self._passed_at = self._held, 0, now
        return held


class Backoff:
    """Delays between attempts to connect to a cluster.

    Steady while the cluster is unreachable (it may come back any moment); doubling up to
    ``ceiling`` while it refuses for good (wrong credentials, missing permissions), since
    retrying cannot help until an operator changes something: a wrong password costs a handful
    of attempts a minute, not a retry storm.
    """

    def __init__(self, base: float = 2.0, ceiling: float = 60.0) -> None:
        self._base = base
        self._ceiling = ceiling
        self._next = base

    def delay(self, retriable: bool) -> float:
        """Seconds to wait after a failed attempt."""
        if retriable:
            self._next = self._base
            return self._base
        current = self._next
        self._next = min(self._ceiling, current * 2)
        return current


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    *,
    stop: asyncio.Event,
    what: str,
    log: Any,
    on_error: Callable[[ReplicatorError], Awaitable[None] | None] | None = None,
    persistent: bool | Callable[[ReplicatorError], bool] = True,
    backoff: Backoff | None = None,
    interruptible: bool = False,
    within: float | None = None,
    expected: Callable[[ReplicatorError], bool] | None = None,
    shared: SharedWarnings | None = None,
) -> T | None:
    """Run ``attempt`` until it succeeds (its result) or ``stop`` is set (``None``).

    Each failure is translated, handed to ``on_error`` (to record it for ``/status``; it may
    also reset the client that failed, synchronously or as a coroutine) and logged as ``cannot
    <what>, retrying``; the next attempt waits ``backoff.delay(error.retriable)``, or less if stop
    comes first. ``persistent=False`` raises errors that are not retriable instead (a refusal that
    retrying cannot change), and a predicate raises those it does not accept; connections are
    persistent: a wrong password is retried, slowly, until an operator fixes it.
    ``interruptible``: an attempt in progress is abandoned (cancelled) when
    stop comes, instead of waited for (a connect to a frozen cluster waits out the request
    timeout, which a shutdown must not). ``within``: no attempt starts after that many seconds;
    the last failure is raised instead (a request that should succeed shortly, such as one to a
    group coordinator still loading, rather than a connection to keep trying). ``expected``:
    failures that are expected for a moment (a topic just created, not in the metadata yet),
    logged at debug the first time and as a warning only if they last (the reminder); they are
    handed to ``on_error`` all the same. ``shared``: the warnings of every retry given the same
    one pass at most once per :data:`REPEAT_LOG_S` between them (the others at debug).
    """
    policy = backoff or Backoff()
    reminder, attempts = Reminder(), 0
    give_up_at = None if within is None else clock.monotonic() + within
    while not stop.is_set():
        try:
            if interruptible:
                return await unless_stopped(attempt(), stop)
            return await attempt()
        except Stopped:
            return None
        except Exception as exc:
            error = translate(exc)
            if not error.retriable and not (
                persistent(error) if callable(persistent) else persistent
            ):
                raise error from exc
            delay = policy.delay(error.retriable)
            if give_up_at is not None and clock.monotonic() + delay >= give_up_at:
                raise error from exc
            if on_error is not None:
                reset = on_error(error)
                if reset is not None:
                    await reset  # closes the client that failed, say
            attempts += 1
            changed = str(error) != reminder.said
            if reminder.due(str(error)):
                passing = changed and expected is not None and expected(error)
                _say(log, f"cannot {what}, retrying", error, attempts, passing, shared)
            await sleep_unless_stopped(stop, delay)
    return None


def _say(
    log: Any,
    event: str,
    error: ReplicatorError,
    attempts: int,
    passing: bool,
    shared: SharedWarnings | None,
) -> None:
    """Log a failure: at debug if it is expected to pass (``passing``) or ``shared`` holds it
    back, else as a warning (saying how many alike were held back)."""
    held = None if passing or shared is None else shared.admit()
    details: dict[str, Any] = {"error": str(error), "retriable": error.retriable}
    if held:
        details["alike_held_back"] = held
    quiet = passing or (shared is not None and held is None)
    (log.debug if quiet else log.warning)(event, **details, attempts=attempts)
