"""The root service starts in dependency order and stops in reverse, whatever ends it.

The service's collaborators (cluster clients, legs and their connections, feeds, flow
heartbeats, the HTTP server) are replaced in :mod:`replicator.service.app` by in-memory fakes
that write what happens to them into one journal, each keeping the contract of the real one
that the order rests on: a leg's :meth:`~replicator.replication.leg.LegRunner.run` ends only
after stop *and* :meth:`~replicator.replication.leg.LegRunner.close_partitions`; a feed's run
ends at stop, after releasing its partitions. The journal is then read for the order
``app.py``'s docstring promises.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from replicator.config.loading import load_settings
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, Leg
from replicator.service import app as app_module
from replicator.service.app import ReplicatorService

ENV = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1:2",
    "REPLICATOR_HTTP_PORT": "0",
}


class Journal:
    """What happened, in order; and what the fakes are told to do."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.source_refused = False  # a leg's start_source answers False (stop during start)
        self.feed_fails = False  # the feed raises, as a crashing task would

    def add(self, event: str) -> None:
        self.events.append(event)

    def index(self, event: str) -> int:
        assert event in self.events, f"{event!r} never happened: {self.events}"
        return self.events.index(event)

    def before(self, *events: str) -> None:
        """Each of ``events`` happened, in this order."""
        positions = [self.index(event) for event in events]
        assert positions == sorted(positions), f"{events} out of order in {self.events}"


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> Journal:
    journal = Journal()

    class Cluster:
        def __init__(self, alias: str, *_: Any) -> None:
            self.alias = alias
            self.error: str | None = None
            self.retriable = True

        async def probe(self) -> None:
            journal.add(f"probe {self.alias}")

        async def close(self) -> None:
            journal.add(f"close cluster {self.alias}")

    class KafkaLegConnections:
        """A leg's clients: the fake leg below connects nothing."""

        def __init__(self, *_: Any) -> None:
            pass

    class LegRunner:
        def __init__(self, leg: Leg, *_: Any) -> None:
            self.leg = leg
            self._closed = asyncio.Event()

        async def start_source(self, stop: asyncio.Event) -> bool:
            journal.add(f"start source {self.leg.name}")
            return not journal.source_refused

        async def run(self, stop: asyncio.Event) -> None:
            journal.add(f"run {self.leg.name}")
            await stop.wait()
            await self._closed.wait()
            journal.add(f"leg ended {self.leg.name}")

        async def close_partitions(self) -> None:
            journal.add(f"close partitions {self.leg.name}")
            self._closed.set()

    class SourceFeed:
        def __init__(self, _settings: Settings, plan: FeedPlan, *_: Any, **__: Any) -> None:
            self.plan = plan

        async def run(self, stop: asyncio.Event) -> None:
            journal.add(f"feed joins {self.plan.name}")
            if journal.feed_fails:
                raise RuntimeError("the feed crashed")
            await stop.wait()
            journal.add(f"feed released and left {self.plan.name}")

    class FlowHeartbeat:
        def __init__(self, _settings: Settings, plan: FeedPlan, *_: Any) -> None:
            self.plan = plan

        async def ensure_topic(self) -> None:
            journal.add(f"heartbeat topic {self.plan.name}")

        async def run(self, stop: asyncio.Event) -> None:
            await stop.wait()

    class HttpServer:
        def __init__(self, *_: Any) -> None:
            self.port = 0

        async def start(self) -> None:
            journal.add("http start")

        async def stop(self) -> None:
            journal.add("http stop")

    for name, fake in {
        "ClusterClient": Cluster,
        "KafkaLegConnections": KafkaLegConnections,
        "LegRunner": LegRunner,
        "SourceFeed": SourceFeed,
        "FlowHeartbeat": FlowHeartbeat,
        "HttpServer": HttpServer,
    }.items():
        monkeypatch.setattr(app_module, name, fake)
    return journal


async def started(journal: Journal, service: ReplicatorService) -> asyncio.Task[None]:
    """The service running, its feeds joined."""
    task = asyncio.create_task(service.run())
    for _ in range(2000):  # up to 10 s on a loaded machine
        if any(event.startswith("feed joins") for event in journal.events) or task.done():
            break
        await asyncio.sleep(0.005)
    return task


async def test_starts_http_first_then_legs_then_feeds_and_stops_in_reverse(
    journal: Journal,
) -> None:
    service = ReplicatorService(load_settings(ENV))
    task = await started(journal, service)
    local, remote = (runner.leg.name for runner in service.legs)
    assert (local, remote) == ("dc1->dc1", "dc1->dc2"), "the local leg first"
    journal.before("http start", f"start source {local}", f"start source {remote}")
    journal.before(f"start source {remote}", f"run {local}", "feed joins replica")
    assert not task.done()

    service.request_stop()
    await asyncio.wait_for(task, 5)
    # The feed stops fetching and releases first; then every leg closes its partitions (drain,
    # commit) and ends; clients close after every task has ended; the HTTP server goes last.
    for leg in (local, remote):
        journal.before(
            "feed released and left replica",
            f"close partitions {leg}",
            f"leg ended {leg}",
            "close cluster dc1",
        )
    journal.before("close cluster dc1", "close cluster dc2", "http stop")
    assert journal.events[-1] == "http stop"
    assert service.stopping.started


async def test_a_crashing_task_stops_the_service_loudly_and_still_closes_in_order(
    journal: Journal,
) -> None:
    journal.feed_fails = True
    service = ReplicatorService(load_settings(ENV))
    with pytest.raises(ExceptionGroup) as raised:
        await asyncio.wait_for(service.run(), 5)
    assert raised.group_contains(RuntimeError, match="the feed crashed")
    assert service.stop_event.is_set(), "a crash stops every other task"
    for leg in ("dc1->dc1", "dc1->dc2"):
        journal.before(f"close partitions {leg}", f"leg ended {leg}", "close cluster dc1")
    assert journal.events[-1] == "http stop"


async def test_a_stop_during_start_runs_no_leg_and_still_closes(journal: Journal) -> None:
    journal.source_refused = True
    service = ReplicatorService(load_settings(ENV))
    task = asyncio.create_task(service.run())
    for _ in range(2000):  # up to 10 s on a loaded machine
        if "start source dc1->dc1" in journal.events:
            break
        await asyncio.sleep(0.005)
    service.request_stop()  # the probes and the heartbeat wait on the stop event
    await asyncio.wait_for(task, 5)
    assert not any(e.startswith(("run ", "feed joins")) for e in journal.events), journal.events
    journal.before("start source dc1->dc1", "close cluster dc1", "http stop")


async def test_an_event_loop_blocked_over_10_s_fails_liveness() -> None:
    """``/livez`` fails, naming how long, once the loop's ticker has not run for over 10 s."""
    service = ReplicatorService(load_settings(ENV))
    assert service.liveness_problems() == []
    service._tick -= 11.0  # as if the loop had not run the ticker for 11 s
    assert service.liveness_problems() == ["event loop blocked for 11s"]
