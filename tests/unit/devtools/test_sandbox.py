"""The sandbox says the trial broker's limits once at start, before it reports running."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from replicator.devtools import sandbox


def test_sandbox_limits_name_every_known_limit_of_the_trial_broker() -> None:
    text = sandbox.limits()
    for limit in (
        "memory only",
        "lost when the sandbox stops",
        "end offsets are wrong after multi-record batches",
        "read until idle",
        "20-45 s",
        "no idempotent or transactional aiokafka producer",
        "enable_idempotence=False",
        "no TLS",
    ):
        assert limit in text, limit


@dataclass
class _ExitedProcess:
    def poll(self) -> int:
        return 1


@dataclass
class _FakeBroker:
    bootstrap_servers: str
    log_path: str = "/tmp/broker.log"
    process: _ExitedProcess = field(default_factory=_ExitedProcess)


def test_sandbox_prints_the_limits_once_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    @contextlib.contextmanager
    def clusters(*aliases: str, broker: str) -> Iterator[dict[str, _FakeBroker]]:
        assert broker == "embedded"
        yield {alias: _FakeBroker(f"127.0.0.1:{9092 + i}") for i, alias in enumerate(aliases)}

    monkeypatch.setattr(sandbox, "local_clusters", clusters)
    # the fake brokers have exited: the sandbox reports it after its first check and stops
    assert sandbox.serve(["dc1", "dc2"], as_json=True) == 1
    said = capsys.readouterr()
    assert json.loads(said.out)["clusters"] == {"dc1": "127.0.0.1:9092", "dc2": "127.0.0.1:9093"}
    assert said.err.count(sandbox.limits()) == 1
    assert said.err.index(sandbox.limits()) < said.err.index("sandbox running")
    assert "memory only" in said.err and "not production" in said.err


def test_the_limits_fit_80_columns_and_the_blocks_say_what_comes_next() -> None:
    assert max(len(line) for line in sandbox.limits().splitlines()) <= 80
    blocks = sandbox.render({"dc1": {"REPLICATOR_X": "1"}, "dc2": {"REPLICATOR_X": "2"}})
    dc1, dc2 = blocks.split("\n\n")
    # Pasting a block only exports: the topics are ensured once, then each replicator runs.
    assert [line for line in dc1.splitlines() if not line.startswith("#")] == [
        "export REPLICATOR_X=1"
    ]
    assert "# then, once: replicator topics ensure" in dc1 and "topics ensure" not in dc2
    assert dc1.endswith("# then: replicator run") and dc2.endswith("# then: replicator run")
