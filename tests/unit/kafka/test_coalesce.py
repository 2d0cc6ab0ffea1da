"""Coalescing: a round's failure reaches every caller as its own error, naming where it arose."""

from __future__ import annotations

import asyncio

from replicator.kafka.coalesce import Coalescer
from replicator.kafka.translation import translate


async def test_a_failed_round_fails_each_caller_with_its_own_copy_naming_the_site() -> None:
    rounds: list[list[str]] = []

    async def fetch_many(keys: list[str]) -> dict[str, int]:
        rounds.append(keys)
        raise AssertionError  # a library's bare assert: no message of its own

    coalescer: Coalescer[str, int] = Coalescer(fetch_many)
    results = await asyncio.gather(coalescer.get("a"), coalescer.get("b"), return_exceptions=True)
    assert rounds == [["a", "b"]]  # one request for both
    first, second = results
    assert isinstance(first, AssertionError) and isinstance(second, AssertionError)
    assert first is not second
    line = fetch_many.__code__.co_firstlineno + 2
    for error in (first, second):
        said = str(translate(error))
        assert said.startswith("AssertionError at ")
        assert said.endswith(f"test_coalesce.py:{line} in fetch_many")
