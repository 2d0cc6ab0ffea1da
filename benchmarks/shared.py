"""What the benchmarks share: a contender process watched for memory and CPU, its environment,
record values, the destinations' watermarks, the ``--setting`` option and the console. Both
:mod:`benchmarks.run` and :mod:`benchmarks.scale` build on it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

from benchmarks.brokers import lists_offsets
from replicator.devtools.embedded import LocalBroker

TOPIC = "bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
console = Console(stderr=True)


class Monitored:
    """A contender process, with its peak RSS and CPU time read from /proc."""

    def __init__(self, args: list[str], env: dict[str, str], name: str) -> None:
        fd, self.log_path = tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            self.process: subprocess.Popen[bytes] = subprocess.Popen(
                args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.peak_rss_kb = 0
        self.started = time.monotonic()

    @classmethod
    def adopt(cls, process: subprocess.Popen[bytes], log_path: str) -> Monitored:
        """A process started elsewhere (a MirrorMaker JVM), monitored the same way."""
        monitored = cls.__new__(cls)
        monitored.process, monitored.log_path = process, log_path
        monitored.peak_rss_kb, monitored.started = 0, time.monotonic()
        return monitored

    def cpu_seconds(self) -> float:
        try:
            with open(f"/proc/{self.process.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def sample_rss(self) -> None:
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        self.peak_rss_kb = max(self.peak_rss_kb, int(line.split()[1]))
        except FileNotFoundError:
            pass

    @property
    def peak_rss_mb(self) -> float:
        return self.peak_rss_kb / 1024

    def stop(self) -> None:
        self.sample_rss()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    env.update(extra or {})
    return env


def value_of(i: int, size: int) -> bytes:
    head = i.to_bytes(8, "big")
    return head + b"v" * (size - len(head))


class Watermarks:
    """Log-end offsets of a topic on some clusters: one ListOffsets request per broker where it
    answers truly (Apache Kafka), else from fetch responses (cheap polling)."""

    def __init__(
        self, brokers: dict[str, LocalBroker], partitions: int, topic: str = TOPIC
    ) -> None:
        self._brokers = brokers
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._consumers: dict[str, AIOKafkaConsumer] = {}

    async def __aenter__(self) -> Watermarks:
        for alias, broker in self._brokers.items():
            consumer = AIOKafkaConsumer(
                bootstrap_servers=broker.bootstrap_servers,
                enable_auto_commit=False,
                auto_offset_reset="none",
                fetch_max_wait_ms=10,
            )
            await consumer.start()
            self._consumers[alias] = consumer
            consumer.assign(self._partitions)  # metadata for them: ListOffsets in one go
            if lists_offsets():
                consumer.pause(*self._partitions)  # asked, never fetched
                continue
            for tp in self._partitions:
                consumer.seek(tp, 1 << 40)  # past the end: fetches return no data, only watermarks
        return self

    async def __aexit__(self, *_: object) -> None:
        for consumer in self._consumers.values():
            await consumer.stop()

    async def totals(self) -> dict[str, int]:
        """Records on each cluster, once every partition has reported its log end."""
        if lists_offsets():
            return {
                alias: sum((await consumer.end_offsets(self._partitions)).values())
                for alias, consumer in self._consumers.items()
            }
        result = {}
        for alias, consumer in self._consumers.items():
            deadline = time.monotonic() + 30
            while True:
                await consumer.getmany(timeout_ms=10)
                ends = [consumer.highwater(tp) for tp in self._partitions]
                if all(end is not None for end in ends) or time.monotonic() > deadline:
                    break
            result[alias] = sum(end or 0 for end in ends)
        return result


def add_setting_option(parser: argparse.ArgumentParser) -> None:
    """``--setting KEY=VALUE`` (repeatable): a replicator setting for every run."""
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a replicator setting for every run, e.g. linger_ms=10 (REPLICATOR_LINGER_MS)",
    )


def rows_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """``rows`` (dicts with the same keys) as a table: a right-aligned column per key."""
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(column.replace("_", " "), justify="right")
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    return table
