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

from replicator.errors import ReplicatorError, TopicMissing, TopicNotListedYet
from replicator.kafka.retry import REPEAT_LOG_S, Backoff, Reminder, SharedWarnings, retrying


class Said:
    """Collects what :func:`retrying` logs: warnings (``lines``) and debug lines (``quiet``)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []
        self.quiet: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    def debug(self, event: str, **fields: Any) -> None:
        self.quiet.append((event, fields))


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


async def test_an_expected_failure_is_said_quietly_unless_it_lasts() -> None:
    """A topic just created, not in the metadata yet: at debug the first time (thousands of
    partitions starting meet it together), a warning if it is still failing at the reminder;
    every failure reaches ``on_error`` (``/status``) either way."""
    said, errors = Said(), list[ReplicatorError]()
    brief = failing(3, TopicNotListedYet("orders created but not in its metadata yet"))
    expected = lambda error: isinstance(error, TopicNotListedYet)  # noqa: E731
    assert await retrying(brief, stop=asyncio.Event(), what="prepare", log=said,
                          on_error=errors.append, backoff=Backoff(base=1.0),
                          expected=expected) == "up"  # fmt: skip
    assert said.lines == [] and [e for e, _ in said.quiet] == ["cannot prepare, retrying"]
    assert len(errors) == 3
    said = Said()
    lasting = failing(40, TopicNotListedYet("orders created but not in its metadata yet"))
    assert await retrying(lasting, stop=asyncio.Event(), what="prepare", log=said,
                          backoff=Backoff(base=1.0), expected=expected) == "up"  # fmt: skip
    assert len(said.quiet) == 1 and [e for e, _ in said.lines] == ["cannot prepare, retrying"]
    said = Said()
    other = failing(1, TopicMissing("orders not in metadata"))
    assert await retrying(other, stop=asyncio.Event(), what="prepare", log=said,
                          backoff=Backoff(base=1.0), expected=expected) == "up"  # fmt: skip
    assert said.quiet == [] and len(said.lines) == 1  # not expected: warned at once


async def test_retries_sharing_their_warnings_say_one_per_interval_and_count_the_rest() -> None:
    """Every partition of a leg preparing its destination while it times out: 1,000 retries,
    each failing twice 40 s apart (a reminder each time), share one warning per 30 s; the
    second says how many alike it held back; every failure still reaches ``on_error``
    (``/status``)."""
    said, errors, shared = Said(), list[ReplicatorError](), SharedWarnings()

    async def one() -> str | None:
        attempt = failing(2, KafkaConnectionError("reading the end of orders/3"))
        return await retrying(attempt, stop=asyncio.Event(), what="prepare", log=said,
                              on_error=errors.append, backoff=Backoff(base=40.0),
                              shared=shared)  # fmt: skip

    assert await asyncio.gather(*(one() for _ in range(1_000))) == ["up"] * 1_000
    assert len(errors) == 2_000
    warned = [fields for event, fields in said.lines]
    assert len(warned) == 2  # at 0 s, and at 40 s
    assert "alike_held_back" not in warned[0] and warned[1]["alike_held_back"] == 999
    assert len(said.quiet) == 2_000 - 2


async def test_a_reminder_says_a_failure_at_first_when_it_changes_and_every_30_s() -> None:
    reminder = Reminder()
    assert reminder.due("dc2 does not answer")
    assert not reminder.due("dc2 does not answer")
    assert reminder.due("Write on topic orders denied by the ACLs of dc2")  # changed
    await asyncio.sleep(REPEAT_LOG_S - 1)
    assert not reminder.due("Write on topic orders denied by the ACLs of dc2")
    await asyncio.sleep(1)
    assert reminder.due("Write on topic orders denied by the ACLs of dc2")  # the reminder
    reminder.clear()  # it worked in between: the same failure again is news
    assert reminder.due("Write on topic orders denied by the ACLs of dc2")
