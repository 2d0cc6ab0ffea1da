"""Integration harness: real brokers (Apache Kafka, or the embedded broker), real replicators.

The backend is chosen by ``REPLICATOR_TEST_BROKER``: ``kafka`` (default: Apache Kafka itself, one
single-node KRaft cluster per datacenter, JVMs started from Maven Central's jars by
:mod:`replicator.devtools.apache_kafka`), ``embedded`` (one embedded broker process per
datacenter: the demo's broker, for the smoke run) or ``container`` (Apache Kafka through
testcontainers, which needs a Docker engine and skips with the reason where there is none).
Replicators run as real ``python -m replicator run`` subprocesses, configured only by environment
variables.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from replicator.devtools.apache_kafka import ApacheKafkaCluster, ScramUser, Security, start_all
from replicator.devtools.embedded import EmbeddedBroker, free_port
from replicator.kafka.admin import describe_topic_configs
from replicator.kafka.readers import StoredRecord, read_topic
from replicator.model.provenance import Tagger
from replicator.topics.configs import as_kafka_reports, overrides

BACKENDS = ("kafka", "embedded", "container")
BACKEND = os.environ.get("REPLICATOR_TEST_BROKER", "kafka")
# The data path every replicator of the suite runs (REPLICATOR_DATA_PATH): the native one, so
# that an extension that does not load fails the suite (exit 2) instead of falling back; `make
# test` runs the smoke subset again on the Python path (the reference).
DATA_PATH = os.environ.get("REPLICATOR_TEST_DATA_PATH", "native")


def _kafka_data() -> Path | None:
    """Apache Kafka's logs in memory (tmpfs) where the machine has one with room (2 GiB free):
    each partition's indexes are files mapped sparse, and a disk here takes 40-60 ms to allocate
    each page of them (the scale benchmark measured it), which made topics of thousands of
    partitions slow to serve; what the tests prove does not depend on the medium. Elsewhere (a
    container's 64 MB /dev/shm, say) the temporary directory."""
    memory = Path("/dev/shm")
    if not os.access(memory, os.W_OK):
        return None
    return memory if shutil.disk_usage(memory).free >= 2 << 30 else None


KAFKA_DATA = _kafka_data()


def kafka_cluster(alias: str, **options: Any) -> ApacheKafkaCluster:
    """An Apache Kafka cluster (not started) keeping its data under :data:`KAFKA_DATA`; the
    data is removed when the cluster is (``remove()``), and at the latest when the test process
    ends (tests that only ``stop()`` a cluster leave no memory held). Its nodes start with the
    JIT's first tier only (``quick_start``): a third faster, and no core spent on compiling."""
    directory = Path(tempfile.mkdtemp(prefix="apache-kafka-", dir=KAFKA_DATA))
    options.setdefault("quick_start", True)
    cluster = ApacheKafkaCluster(alias, directory=directory, **options)
    atexit.register(shutil.rmtree, directory, True)
    return cluster


@contextmanager
def running(clusters: dict[str, ApacheKafkaCluster]) -> Iterator[dict[str, ApacheKafkaCluster]]:
    """``clusters`` (made by :func:`kafka_cluster`) started together, removed on exit."""
    try:
        start_all(list(clusters.values()))
        yield clusters
    finally:
        for cluster in clusters.values():
            cluster.remove()


APACHE_KAFKA = BACKEND in ("kafka", "container")
"""Whether the brokers are Apache Kafka (the product's target), not the embedded broker."""


class Broker(Protocol):
    alias: str

    @property
    def bootstrap_servers(self) -> str: ...

    def stop(self) -> None: ...


@dataclass
class KafkaContainerBroker:
    """Apache Kafka (KRaft, single node) in a container, for where a Docker engine runs."""

    alias: str
    container: Any = None

    @property
    def bootstrap_servers(self) -> str:
        return str(self.container.get_bootstrap_server())

    def start(self) -> KafkaContainerBroker:
        from testcontainers.kafka import KafkaContainer

        self.container = KafkaContainer("apache/kafka:4.1.1").with_kraft()
        self.container.start()
        return self

    def stop(self) -> None:
        if self.container is not None:
            self.container.stop()


def docker_unavailable_reason() -> str | None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:
        return f"REPLICATOR_TEST_BROKER=container needs a Docker engine, none reachable: {exc}"
    return None


@contextmanager
def start_clusters(
    *aliases: str, version: str | None = None, second_listener: bool = False
) -> Iterator[dict[str, Broker]]:
    """One single-node cluster per datacenter alias, of the chosen backend; stopped on exit.
    ``version``: an Apache Kafka release other than the pinned one (skipped on other backends).
    ``second_listener``: each cluster also has its ``WAN`` listener, for the clients of one
    replica only to reach it through a proxy of the test's (Apache Kafka only)."""
    if version is not None and BACKEND != "kafka":
        pytest.skip(f"Apache Kafka {version} runs only with REPLICATOR_TEST_BROKER=kafka")
    if second_listener and BACKEND != "kafka":
        pytest.skip("a second listener needs REPLICATOR_TEST_BROKER=kafka")
    if BACKEND not in BACKENDS:
        raise pytest.UsageError(f"REPLICATOR_TEST_BROKER must be one of {BACKENDS}, not {BACKEND}")
    if BACKEND == "container":
        reason = docker_unavailable_reason()
        if reason:
            pytest.skip(reason)
    brokers: dict[str, Broker] = {}
    try:
        if BACKEND == "kafka":
            pinned: dict[str, Any] = {} if version is None else {"version": version}
            if second_listener:
                clusters = {
                    alias: kafka_cluster(alias, wan_port=free_port(), **pinned) for alias in aliases
                }
            else:
                clusters = {alias: kafka_cluster(alias, **pinned) for alias in aliases}
            brokers.update(clusters)
            start_all(list(clusters.values()))
        for alias in aliases:
            if BACKEND == "container":
                brokers[alias] = KafkaContainerBroker(alias).start()
            elif BACKEND == "embedded":
                brokers[alias] = EmbeddedBroker(alias).start()
        yield brokers
    finally:
        for broker in brokers.values():
            if isinstance(broker, ApacheKafkaCluster):
                broker.remove()
            else:
                broker.stop()


class Cluster(Broker, Protocol):
    """A broker the test starts, stops and restarts itself (of the chosen backend)."""

    @property
    def port(self) -> int: ...

    @property
    def process(self) -> subprocess.Popen[bytes] | None: ...

    def start(self) -> Cluster: ...

    def kill(self) -> None: ...

    def restart_empty(self) -> None: ...


def new_cluster(alias: str, advertised_port: int | None = None) -> Cluster:
    """A single-node cluster of the backend, not started (``start()`` it; ``stop()`` it, and
    ``start()`` again: Apache Kafka keeps its log, the embedded broker starts empty).
    ``advertised_port``: clients are told to connect there (a proxy in front of it)."""
    if BACKEND == "kafka":
        return kafka_cluster(alias, advertised_port=advertised_port)
    if BACKEND == "embedded":
        return EmbeddedBroker(alias, advertised_port=advertised_port)
    pytest.skip("a cluster stopped and started by the test needs REPLICATOR_TEST_BROKER=kafka")


@dataclass
class RefusingCluster:
    """A cluster whose SASL_PLAINTEXT listener refuses every login (see :func:`scram_cluster`)."""

    bootstrap_servers: str
    log: Callable[[], str] | None = None  # the broker's own log, where it keeps one

    def refusals(self) -> int | None:
        """How many logins the broker refused so far, as its log says (Apache Kafka logs each
        one); ``None`` where the broker keeps no such log."""
        if self.log is None:
            return None
        return self.log().count("Failed authentication with")


@contextmanager
def scram_cluster(alias: str) -> Iterator[RefusingCluster]:
    """A started cluster whose SASL_PLAINTEXT listener requires SCRAM and knows no user the
    tests log in as (every login is refused)."""
    if BACKEND == "kafka":
        users = (ScramUser("someone-else", "not-the-canary"),)
        cluster = kafka_cluster(alias, security=Security(users=users, sasl_plaintext=True))
        try:
            cluster.start()
            node = cluster.nodes[0]
            yield RefusingCluster(
                cluster.listener("SASL_PLAINTEXT"),
                lambda: node.log_path.read_text(errors="replace"),
            )
        finally:
            cluster.remove()
        return
    broker = EmbeddedBroker(alias, authentication=True).start()
    try:
        yield RefusingCluster(broker.bootstrap_servers)
    finally:
        broker.stop()


# -- replicator processes ---------------------------------------------------------------------


@dataclass
class ReplicatorProcess:
    """One ``replicator run`` subprocess beside one cluster."""

    alias: str
    env: dict[str, str]
    args: tuple[str, ...] = ("run",)  # the replicator command line (mirror-maker, mm2 ...)
    # Another build's source tree (its ``replicator`` package) to run instead of this one.
    source: Path | None = None
    http_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(
        default_factory=lambda: Path(tempfile.mkstemp(prefix="replicator-", suffix=".log")[1])
    )

    def start(self) -> ReplicatorProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
        # The machine's HOSTNAME (exported on some CI runners) would give every replica of a
        # test the same static identity: a test that wants one says so (REPLICATOR_INSTANCE_ID,
        # or HOSTNAME in its env, as a pod has).
        env.pop("HOSTNAME", None)
        # A replica killed in a test gives its partitions away after 10 s, not Kafka's 45: also
        # for the command lines given no replicator_env (mirror-maker, mm2 FILE).
        env["REPLICATOR_GROUP_SESSION_TIMEOUT_MS"] = "10000"
        if self.source is None:  # another build's tree may predate the setting
            env["REPLICATOR_DATA_PATH"] = DATA_PATH
        env.update(self.env)
        env["REPLICATOR_HTTP_PORT"] = str(self.http_port)
        env["REPLICATOR_HTTP_HOST"] = "127.0.0.1"
        if self.source is not None:  # first on the path, and the directory -m looks in first
            env["PYTHONPATH"] = str(self.source)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "replicator", *self.args],
                env=env,
                cwd=self.source,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def get(self, path: str) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read(), exc.code
        if path == "/metrics":
            return status, body.decode()
        return status, json.loads(body)

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            self.assert_running()
            try:
                return self.get("/readyz")[0] == 200
            except OSError:
                return False

        wait_until(ready, timeout, f"replicator {self.alias} ready", self.log)

    def wait_serving(self, timeout: float = 30.0) -> None:
        def serving() -> bool:
            self.assert_running()
            try:
                self.get("/livez")
                return True
            except OSError:
                return False

        wait_until(serving, timeout, f"replicator {self.alias} serving HTTP", self.log)

    def assert_running(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(
                f"replicator {self.alias} exited with {self.process.returncode}:\n{self.log()}"
            )

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait: the exit status of a graceful stop."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"replicator {self.alias} ignored SIGTERM:\n{self.log()}"
            ) from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-20000:]

    def events(self, event: str) -> list[dict[str, Any]]:
        """Every line of the (JSON) log saying ``event``, in order."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if entry.get("event") == event:
                        found.append(entry)
        return found

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include ``labels``."""
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total


class Start(Protocol):
    """Starts a replicator beside cluster ``alias``: ``replicator run``, or another command."""

    def __call__(
        self,
        alias: str,
        env: dict[str, str],
        args: tuple[str, ...] = ("run",),
        source: Path | None = None,
    ) -> ReplicatorProcess: ...


def replicator_cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """Run ``replicator ARGS`` with only ``env``'s REPLICATOR_* variables; (status, out, err)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    # check-config checks that the HTTP port is free: a port of its own, unless the test gives one.
    port = {"REPLICATOR_HTTP_PORT": str(free_port())}
    done = subprocess.run(
        [sys.executable, "-m", "replicator", *args],
        env={**clean, **port, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def replicator_env(local: str, brokers: dict[str, Broker], **extra: str) -> dict[str, str]:
    env = {
        "REPLICATOR_LOCAL_CLUSTER": local,
        "REPLICATOR_LOG_FORMAT": "json",
        "REPLICATOR_COMMIT_INTERVAL_MS": "200",
        "REPLICATOR_METADATA_MAX_AGE_MS": "1000",
        # A replica killed in a test gives its partitions away after 10 s, not Kafka's 45.
        "REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "10000",
    }
    for alias, broker in brokers.items():
        env[f"REPLICATOR_CLUSTERS__{alias.upper()}__BOOTSTRAP_SERVERS"] = broker.bootstrap_servers
    env.update({f"REPLICATOR_{k.upper()}": v for k, v in extra.items()})
    return env


def default_timings_env(local: str, brokers: dict[str, Broker], **extra: str) -> dict[str, str]:
    """Only what an operator must set (the clusters, which one is local), every timing at the
    product's default: the harness's shortened session is set back to Kafka's 45 s. ``extra``:
    variables as they are named in the environment."""
    env = {
        "REPLICATOR_LOCAL_CLUSTER": local,
        "REPLICATOR_LOG_FORMAT": "json",  # the harness reads the log's events
        "REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "45000",  # the default, over the harness's 10 s
    }
    for alias, broker in brokers.items():
        env[f"REPLICATOR_CLUSTERS__{alias.upper()}__BOOTSTRAP_SERVERS"] = broker.bootstrap_servers
    env.update(extra)
    return env


# -- data helpers -----------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    context: Callable[[], str] | None = None,
) -> float:
    """Poll ``predicate`` until true; return the seconds it took; fail with context if never.

    A client error the predicate raises (its read of a cluster that does not answer yet: a
    broker thawed but fenced until it registers again lists no broker) is a "not yet", named
    in the failure if the wait times out."""
    start = time.monotonic()
    last_error: KafkaError | None = None
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except KafkaError as exc:
            last_error = exc
        time.sleep(0.25)
    detail = f"\n{context()}" if context else ""
    if last_error is not None:
        detail = f" (the last check failed: {last_error!r}){detail}"
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _create_topics(bootstrap: str, topics: dict[str, int], configs: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, n, 1, topic_configs=configs) for name, n in topics.items()]
        )
    finally:
        await admin.close()


async def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    # No auto-commit: at its stop it would commit the position it resolved itself (the log
    # end, by its reset policy) over the offsets committed here.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


def commit_offsets(broker: Broker, group: str, offsets: dict[TopicPartition, int]) -> None:
    """``group``'s offsets committed in ``broker``'s cluster, as a tool with no member does
    (kafka-consumer-groups --reset-offsets, say)."""
    run(_commit(broker.bootstrap_servers, group, offsets))


def create_topics(broker: Broker, configs: dict[str, str] | None = None, **topics: int) -> None:
    run(_create_topics(broker.bootstrap_servers, topics, configs or {}))


async def admin_client(bootstrap: str) -> AIOKafkaAdminClient:
    """A started admin client of one cluster (the caller closes it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    return admin


async def topic_overrides(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` itself (what AlterConfigs replaces), each entry's source as
    Apache Kafka reports it (:func:`as_kafka_reports`, for brokers that label them defaults)."""
    found = await describe_topic_configs(admin, [topic])
    return overrides(as_kafka_reports(found.get(topic, [])))


def configs_set(broker: Broker, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` itself in ``broker``'s cluster."""

    async def read_overrides() -> dict[str, str]:
        admin = await admin_client(broker.bootstrap_servers)
        try:
            return await topic_overrides(admin, topic)
        finally:
            await admin.close()

    return run(read_overrides())


Sent = StoredRecord  # a record as the test produced it, with where it landed


async def _produce(bootstrap: str, topic: str, records: list[Sent]) -> list[Sent]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                key=r.key,
                value=r.value,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        placed = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [
        Sent(topic, m.partition, m.offset, r.key, r.value, r.headers, r.timestamp)
        for r, m in zip(records, placed, strict=True)
    ]


def produce_records(broker: Broker, topic: str, records: list[Sent]) -> list[Sent]:
    """Produce ``records`` as given (partition, key, value, headers, timestamp), in order."""
    return run(_produce(broker.bootstrap_servers, topic, records))


def produce(
    broker: Broker,
    topic: str,
    count: int,
    partitions: int,
    tag: str = "",
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> list[Sent]:
    """Produce ``count`` keyed records round-robin over partitions, with headers and timestamps."""
    base = int(time.time() * 1000) - 60_000
    records = [
        Sent(
            topic,
            i % partitions,
            -1,
            f"key-{i % 13}".encode(),
            f"{broker.alias}{tag}-{i}".encode(),
            (("trace-id", f"t{i}".encode()), ("app", b"orders-service"), *headers),
            base + i,
        )
        for i in range(count)
    ]
    return run(_produce(broker.bootstrap_servers, topic, records))


def copies_of(source: list[Sent], topic: str, origin: str = "dc1") -> list[Sent]:
    """What the replicator of ``origin`` writes into ``topic`` for ``source`` records (untagged
    or derived): the same place, with provenance naming the replica topic they were read from."""
    copies = []
    for r in source:
        _, tagged = Tagger(origin, r.topic, r.partition).retag(r.headers, r.offset)
        assert tagged is not None, f"not replicated: {r}"
        copies.append(Sent(topic, r.partition, -1, r.key, r.value, tuple(tagged), r.timestamp))
    return copies


def read(broker: Broker, topic: str) -> list[StoredRecord]:
    return run(read_topic(broker.bootstrap_servers, topic))


def count(broker: Broker, topic: str) -> int:
    return len(read(broker, topic))


def holds(broker: Broker, topic: str, records: int) -> Callable[[], bool]:
    """A predicate for :func:`wait_until`: ``topic`` on ``broker`` holds at least ``records``."""
    return lambda: count(broker, topic) >= records


@dataclass
class Oracle:
    """Record-level comparison of a source replica topic with one real topic."""

    source_records: int
    delivered: int
    missing: list[tuple[int, int]]
    duplicates: int
    out_of_order: list[tuple[int, int]]

    def __str__(self) -> str:
        return (
            f"{self.source_records} source records, {self.delivered} delivered, "
            f"{len(self.missing)} missing (e.g. {self.missing[:3]}), {self.duplicates} duplicates, "
            f"{len(self.out_of_order)} out of order (e.g. {self.out_of_order[:3]})"
        )


def oracle(source: list[StoredRecord], destination: list[StoredRecord], origin: str) -> Oracle:
    """Check ``destination`` against ``source`` (records of cluster ``origin``) by provenance.

    Missing: a source record absent from the destination. Duplicates: extra copies (allowed only
    for batches in flight at a crash). Out of order: in a destination partition, a record whose
    first occurrence comes after that of a later source record of the same partition.
    """
    wanted = {(r.partition, r.offset): r for r in source}
    seen: Counter[tuple[int, int]] = Counter()
    last: dict[int, int] = {}
    out_of_order = []
    for record in destination:
        tag = record.provenance
        if tag is None or tag.cluster != origin:
            continue
        key = (tag.partition, tag.offset)
        seen[key] += 1
        if seen[key] > 1:
            continue
        if tag.offset < last.get(tag.partition, -1):
            out_of_order.append(key)
        last[tag.partition] = max(last.get(tag.partition, -1), tag.offset)
        assert record.partition == tag.partition, "partition number changed"
        source_record = wanted.get(key)
        assert source_record is not None, f"{key} is not a source record"
        assert (record.key, record.value) == (source_record.key, source_record.value)
    return Oracle(
        source_records=len(wanted),
        delivered=len(seen),
        missing=sorted(set(wanted) - set(seen)),
        duplicates=sum(n - 1 for n in seen.values()),
        out_of_order=out_of_order,
    )


def peak_rss_mb(process: ReplicatorProcess) -> float:
    """The replicator process's peak resident memory so far (VmHWM), in MB."""
    return _memory_mb(process, "VmHWM")


def rss_mb(process: ReplicatorProcess) -> float:
    """The replicator process's resident memory now (VmRSS), in MB."""
    return _memory_mb(process, "VmRSS")


def _memory_mb(process: ReplicatorProcess, field_name: str) -> float:
    assert process.process is not None
    with open(f"/proc/{process.process.pid}/status") as status:
        for line in status:
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Stream:
    """Produces ``per_tick`` records every ``tick`` seconds in a thread until stopped."""

    def __init__(self, broker: Broker, topic: str, partitions: int, per_tick: int = 50) -> None:
        self.broker, self.topic, self.partitions, self.per_tick = (
            broker,
            topic,
            partitions,
            per_tick,
        )
        self.produced = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        chunk = 0
        while not self._stop.is_set():
            try:
                sent = produce(
                    self.broker, self.topic, self.per_tick, self.partitions, tag=f"-s{chunk}"
                )
                self.produced += len(sent)
            except Exception as exc:  # reported by the test, never swallowed silently
                self.errors.append(repr(exc))
            chunk += 1
            time.sleep(0.1)


def holds_distinct(broker: Broker, topic: str, records: int) -> Callable[[], bool]:
    """A predicate: ``topic`` holds at least ``records`` distinct source records (by provenance)."""

    def check() -> bool:
        origins = {
            (p.cluster, p.partition, p.offset)
            for r in read(broker, topic)
            if (p := r.provenance) is not None
        }
        return len(origins) >= records

    return check


# -- several replicators sharing one datacenter's partitions ----------------------------------


def feed_status(process: ReplicatorProcess) -> dict[str, Any] | None:
    """``/status``'s ``source_feed`` of a running replicator (``None`` if it does not answer)."""
    try:
        _, body = process.get("/status")
    except (OSError, ValueError):
        return None
    feed = body.get("source_feed") if isinstance(body, dict) else None
    return feed if isinstance(feed, dict) else None


def settled(*processes: ReplicatorProcess) -> Callable[[], bool]:
    """Whether every leg of every process has committed every source record it fetched (lag 0,
    none unknown, every partition replicating; heartbeat topics aside, which flow on their own
    interval): nothing more is written until more records are produced. The condition an
    exact count waits for, instead of a fixed sleep ("a duplicate would have arrived by now")."""

    def check() -> bool:
        for process in processes:
            try:
                _, body = process.get("/status")
            except (OSError, ValueError):
                return False
            legs = body.get("legs") if isinstance(body, dict) else None
            if not legs:
                return False
            for leg in legs:
                lag = leg["lag"]
                beating = sum(
                    t["records"] for t in lag["topics"] if t["topic"].endswith("heartbeats")
                )
                if lag["partitions_unknown"] or lag["records"] - beating:
                    return False
                states = leg["partition_states"]
                if any(n for state, n in states.items() if state != "replicating"):
                    return False
                if not leg["connected"]:
                    return False
        return True

    return check


def wait_settled(*processes: ReplicatorProcess, timeout: float = 60.0) -> None:
    """Wait until :func:`settled` holds on three polls in a row (a fetch answered in between:
    a source log end learnt late cannot pass for an idle leg)."""
    streak = 0

    def steady() -> bool:
        nonlocal streak
        streak = streak + 1 if settled(*processes)() else 0
        return streak >= 3

    wait_until(
        steady,
        timeout,
        "every leg to commit what it read",
        lambda: "\n".join(json.dumps(p.get("/status")[1].get("legs"))[:3000] for p in processes),
    )


def assigned_partitions(process: ReplicatorProcess) -> int | None:
    """How many source partitions the replicator's group gave it (``None``: not answering or not
    joined, so that a replica in the middle of a rebalance never counts as holding nothing)."""
    feed = feed_status(process)
    if feed is None or not feed.get("joined"):
        return None
    return int(feed["assigned_partitions"])


def share_partitions(
    processes: list[ReplicatorProcess], partitions: int
) -> Callable[[], dict[int, int] | None]:
    """A probe: the partitions each of ``processes`` holds (by pid), when together they hold
    exactly ``partitions`` and each holds some; ``None`` otherwise (a rebalance under way)."""

    def probe() -> dict[int, int] | None:
        held: dict[int, int] = {}
        for process in processes:
            process.assert_running()
            assigned = assigned_partitions(process)
            if not assigned:
                return None
            assert process.process is not None
            held[process.process.pid] = assigned
        return held if sum(held.values()) == partitions else None

    return probe


def holds_value(broker: Broker, topic: str, value: bytes) -> Callable[[], bool]:
    """A predicate: ``topic`` on ``broker`` holds a record whose value is ``value``."""
    return lambda: any(r.value == value for r in read(broker, topic))
