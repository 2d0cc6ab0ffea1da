"""The one retry policy: attempts until success or stop, backoff by retriability, quiet repeats."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import (
    GroupLoadInProgressError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)

from replicator.errors import ReplicatorError
from replicator.kafka.retry import Backoff, retrying


class Said:
    """Collects what :func:`retrying` logs."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


def failing(times: int, error: Exception, result: str = "up") -> Any:
    calls = {"n": 0}

    async def attempt() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise error
        return result

    attempt.calls = calls  # type: ignore[attr-defined]
    return attempt


async def test_retries_until_success_logging_a_repeated_failure_once() -> None:
    said = Said()
    errors: list[ReplicatorError] = []
    attempt = failing(5, KafkaConnectionError("refused"))
    result = await retrying(
        attempt,
        stop=asyncio.Event(),
        what="reach dc2",
        log=said,
        on_error=errors.append,
        backoff=Backoff(base=0.001),
    )
    assert result == "up" and attempt.calls["n"] == 6
    assert len(errors) == 5 and all(e.retriable for e in errors)
    assert [event for event, _ in said.lines] == ["cannot reach dc2, retrying"]


async def test_stop_ends_the_wait_at_once() -> None:
    stop = asyncio.Event()
    attempt = failing(1_000, KafkaConnectionError("refused"))
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, stop.set)
    started = loop.time()
    result = await retrying(
        attempt, stop=stop, what="reach dc2", log=Said(), backoff=Backoff(base=30.0)
    )
    assert result is None
    # On fake loop time: the 30 s backoff ended exactly when stop was set.
    assert loop.time() - started == pytest.approx(0.05)


async def test_a_refusal_is_raised_unless_persistent() -> None:
    refused = TopicAuthorizationFailedError()
    with pytest.raises(ReplicatorError) as raised:
        await retrying(
            failing(1, refused), stop=asyncio.Event(), what="send", log=Said(), persistent=False
        )
    assert not raised.value.retriable
    # Connections are persistent: a refusal is retried (slowly) until it goes away.
    result = await retrying(
        failing(2, refused),
        stop=asyncio.Event(),
        what="connect",
        log=Said(),
        backoff=Backoff(base=0.001, ceiling=0.002),
    )
    assert result == "up"


def test_backoff_is_steady_while_retriable_and_doubles_while_refused() -> None:
    backoff = Backoff(base=1.0, ceiling=4.0)
    assert [backoff.delay(False) for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    assert backoff.delay(True) == 1.0


async def test_within_raises_the_last_failure_once_the_time_is_spent() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    loading = GroupLoadInProgressError()
    with pytest.raises(ReplicatorError) as raised:
        await retrying(
            failing(1_000, loading),
            stop=asyncio.Event(),
            what="commit",
            log=Said(),
            persistent=False,
            backoff=Backoff(base=0.25),
            within=1.0,
        )
    assert raised.value.retriable and "GroupLoadInProgress" in str(raised.value)
    # Attempts at 0, 0.25, 0.5 and 0.75 s; a fifth would start after the second given.
    assert loop.time() - started == pytest.approx(0.75)
    # A failure that passes inside the time is retried as usual.
    result = await retrying(
        failing(3, loading),
        stop=asyncio.Event(),
        what="commit",
        log=Said(),
        persistent=False,
        backoff=Backoff(base=0.25),
        within=1.0,
    )
    assert result == "up"
