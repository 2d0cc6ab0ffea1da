"""Apache Kafka's own MirrorMakers on loopback, from Maven Central's jars: the tools the product
is compared with, record by record, in the tests and the benchmarks.

Owns MirrorMaker 1's jars (``kafka.tools.MirrorMaker`` from Kafka 3.9.1, the last line that has
it, with its reload4j logging; copied by the same Maven step as Kafka's own jars into a
directory of their own, since 3.9 and 4.x jars never share a classpath) and the JVM processes of
MirrorMaker 2 in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``, on Kafka
4.x's jars, :func:`~replicator.devtools.apache_kafka.kafka_libs`) and MirrorMaker 1. Each runs
with its output in a file of its work directory, dies with the process that started it
(``PR_SET_PDEATHSIG``), stops gracefully on SIGTERM (MirrorMaker 2 commits its Connect offsets,
MirrorMaker 1 its consumer offsets) and reports its CPU time and memory from ``/proc``.

Nothing here is used by ``replicator run``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from replicator.devtools.apache_kafka import kafka_libs
from replicator.devtools.jvm import cache_root, copy_jars, ensure_dir, spawn_jvm
from replicator.errors import LocalKafkaError

MM1_VERSION = "3.9.1"
"""MirrorMaker 1's release: the last Kafka line that ships ``kafka.tools.MirrorMaker``."""

MM1_POM = Path(__file__).parent / "maven" / "mm1.pom.xml"
MM2_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
MM1_MAIN = "kafka.tools.MirrorMaker"

MM2_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %X{connector.context}%m (%c:%L)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
"""

_MM1_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
"""

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def mm1_libs(version: str = MM1_VERSION) -> Path:
    """The directory holding MirrorMaker 1's jars (Kafka ``version``'s core with reload4j),
    fetched through Maven the first time into the cache that holds Kafka's own jars."""
    libs = cache_root() / f"mirror-maker-1-{version}" / "libs"
    return copy_jars(MM1_POM, libs, {"kafka.version": version})


@dataclass
class MirrorMakerProcess:
    """One MirrorMaker JVM: its process, its output file and its work directory."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    workdir: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log(self, tail: int = 20000) -> str:
        """The tail of the JVM's output (stdout and stderr)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"--- {self.name} (pid {self.pid}) ---\n{text[-tail:]}"

    def wait_for_log(self, text: str, timeout: float = 120.0) -> None:
        """Wait until the output holds ``text``; :class:`LocalKafkaError` with the log if the
        process exits first or the time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_path.read_text(errors="replace"):
                return
            if not self.running:
                raise LocalKafkaError(
                    f"{self.name} exited ({self.process.returncode}):\n{self.log()}"
                )
            time.sleep(0.25)
        raise LocalKafkaError(f"{self.name}: no {text!r} after {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM to the process group (a graceful stop: MirrorMaker 2 stops its herders and
        commits its Connect offsets, MirrorMaker 1 commits its consumers' offsets), SIGKILL after
        ``timeout``; the exit code (a JVM stopped by SIGTERM exits with 143)."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.wait()

    def kill(self) -> None:
        """SIGKILL to the process group: nothing committed on the way out."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self.process.wait()

    def cpu_seconds(self) -> float:
        """The CPU time the JVM used so far (user and system, every thread), from ``/proc``."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        # Fields after the command name (which may hold spaces), itself in parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        utime, stime = int(fields[11]), int(fields[12])
        return (utime + stime) / _CLOCK_TICKS

    def rss_mb(self, peak: bool = True) -> float:
        """The JVM's resident memory in MB: its peak so far (``VmHWM``), or now (``VmRSS``)."""
        wanted = "VmHWM:" if peak else "VmRSS:"
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(wanted):
                return int(line.split()[1]) / 1024
        return 0.0


def mm2_local_properties(bootstrap: dict[str, str]) -> dict[str, str]:
    """What MirrorMaker 2 needs on clusters of one broker each, and nothing more: ``clusters``
    and each alias's ``bootstrap.servers`` from ``bootstrap``, replication factor 1 for every
    topic it creates, plugins found by their manifests (no classpath scan), ACL sync off."""
    properties = {"clusters": ", ".join(bootstrap)}
    for alias, servers in bootstrap.items():
        properties[f"{alias}.bootstrap.servers"] = servers
        # Each herder's worker would scan the classpath by reflection (seconds each) for
        # plugins that every jar here declares in ServiceLoader manifests anyway; the property
        # is read per cluster alias (MirrorMaker 2 ignores it at the top level).
        properties[f"{alias}.plugin.discovery"] = "service_load"
    for topic in (
        "checkpoints.topic",
        "heartbeats.topic",
        "offset-syncs.topic",
        "offset.storage",
        "status.storage",
        "config.storage",
    ):
        properties[f"{topic}.replication.factor"] = "1"
    properties["replication.factor"] = "1"
    properties["sync.topic.acls.enabled"] = "false"
    return properties


def mm2_test_properties(bootstrap: dict[str, str]) -> dict[str, str]:
    """The settings Kafka's own MirrorMaker 2 tests run with (:func:`mm2_local_properties`,
    intervals of 1 s, Connect offsets flushed every second). No flow is enabled: add
    ``A->B.enabled = true`` and the rest."""
    properties = mm2_local_properties(bootstrap)
    for alias in bootstrap:
        properties[f"{alias}.offset.flush.interval.ms"] = "1000"
    for interval in (
        "emit.checkpoints",
        "emit.heartbeats",
        "refresh.topics",
        "refresh.groups",
        "sync.group.offsets",
        "sync.topic.configs",
    ):
        properties[f"{interval}.interval.seconds"] = "1"
    return properties


def properties_text(properties: dict[str, str]) -> str:
    """``properties`` as a Java ``.properties`` file (keys and values written as they are: no
    key may hold a space, ``:`` or ``=``)."""
    return "".join(f"{key} = {value}\n" for key, value in properties.items())


def start_mm2(
    properties: Path,
    workdir: Path,
    clusters: list[str] | None = None,
    heap_mb: int = 512,
) -> MirrorMakerProcess:
    """MirrorMaker 2 in dedicated mode on ``properties`` (``--clusters``: the target clusters
    this process drives; all when ``None``), its output in ``workdir/mm2.log``. Its
    ``Kafka MirrorMaker started`` line comes before any connector runs: wait on data instead."""
    libs = kafka_libs()
    ensure_dir(workdir)
    log4j2 = workdir / "mm2-log4j2.properties"
    log4j2.write_text(MM2_LOG4J2)
    log_path = workdir / "mm2.log"
    process = spawn_jvm(
        [
            f"-Dlog4j2.configurationFile={log4j2}",
            "-cp",
            f"{libs}/*",
            MM2_MAIN,
            str(properties),
            *(["--clusters", *clusters] if clusters else []),
        ],
        log_path,
        workdir / "mm2-tmp",
        heap_mb,
    )
    return MirrorMakerProcess("MirrorMaker 2", process, log_path, workdir)


def start_mm1(
    consumer_configs: list[Path],
    producer_config: Path,
    args: list[str],
    workdir: Path,
    heap_mb: int = 256,
) -> MirrorMakerProcess:
    """MirrorMaker 1 (Kafka 3.9.1's ``kafka.tools.MirrorMaker``, on its own jars) with one
    ``--consumer.config`` per file, the ``--producer.config`` and the other options ``args``
    (``--include``, ``--num.streams`` ...), its output in ``workdir/mm1.log``."""
    libs = mm1_libs()
    ensure_dir(workdir)
    log4j = workdir / "mm1-log4j.properties"
    log4j.write_text(_MM1_LOG4J)
    log_path = workdir / "mm1.log"
    process = spawn_jvm(
        [
            f"-Dlog4j.configuration=file:{log4j}",
            "-cp",
            f"{libs}/*",
            MM1_MAIN,
            *[arg for config in consumer_configs for arg in ("--consumer.config", str(config))],
            "--producer.config",
            str(producer_config),
            *args,
        ],
        log_path,
        workdir / "mm1-tmp",
        heap_mb,
    )
    return MirrorMakerProcess("MirrorMaker 1", process, log_path, workdir)


if __name__ == "__main__":  # ``python -m replicator.devtools.mirror_makers``: fetch MM1's jars
    print(mm1_libs())  # in a directory of their own
