"""Java tools run from Maven Central's jars: each release's jars copied once by Maven into a
cache (``~/.cache/replicator``, offline once it holds them), and JVMs started from them that die
with the process that started them (``PR_SET_PDEATHSIG``), so no broker or MirrorMaker outlives a
killed test run. Used by :mod:`replicator.devtools.apache_kafka` and
:mod:`replicator.devtools.mirror_makers`; the cache also holds :mod:`replicator.devtools.promtool`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from replicator.errors import LocalKafkaError

_PR_SET_PDEATHSIG = 1

JVM_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Xshare:auto",
)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {root}
rootLogger.appenderRef.out.ref = out
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def cache_root() -> Path:
    """Where fetched jars live: ``$KAFKA_JARS_CACHE`` (not a ``REPLICATOR_*`` name:
    the product refuses unknown ones), else ``~/.cache/replicator``."""
    configured = os.environ.get("KAFKA_JARS_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "replicator"


def copy_jars(pom: Path, libs: Path, properties: dict[str, str]) -> Path:
    """``libs``, holding the runtime jars of ``pom`` (its ``-D`` ``properties`` given), copied
    by Maven the first time (offline from ``~/.m2`` when it can, else from Maven Central); a
    ``complete`` file beside it marks a finished copy."""
    done = libs.parent / "complete"
    if done.exists():
        return libs
    maven = shutil.which("mvn")
    if maven is None:
        raise LocalKafkaError("Apache Kafka's jars come through Maven: install mvn (3.8+)")
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=ensure_dir(libs.parent)))
    command = [
        maven,
        "-B",
        "-q",
        "-f",
        str(pom),
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
        *(f"-D{key}={value}" for key, value in properties.items()),
    ]
    failure = ""
    for offline in (["-o"], []):
        done_run = subprocess.run(
            [command[0], *offline, *command[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if done_run.returncode == 0:
            break
        failure = (done_run.stdout + done_run.stderr)[-3000:]
    else:
        shutil.rmtree(staging, ignore_errors=True)
        given = " ".join(f"{key}={value}" for key, value in properties.items())
        raise LocalKafkaError(f"Maven could not fetch the jars of {pom.name} ({given}):\n{failure}")
    # Another process may have finished first: its copy is as good as ours.
    with contextlib.suppress(OSError):
        staging.rename(libs)
    shutil.rmtree(staging, ignore_errors=True)
    done.touch()
    return libs


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def java() -> str:
    """The ``java`` to run Kafka with (17 or later): ``$JAVA_HOME/bin/java``, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise LocalKafkaError("Apache Kafka needs Java 17 or later: no java on the PATH")
    return found


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies, so no JVM outlives the tests."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn_jvm(
    args: list[str], log_path: Path, tmpdir: Path, heap_mb: int = 512
) -> subprocess.Popen[bytes]:
    """Start one JVM with its output in ``log_path`` (an unread pipe would block it), its own
    native-library tmpdir, its own session, dying with this process."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [
                java(),
                "-Xms64m",
                f"-Xmx{heap_mb}m",
                *JVM_FLAGS,
                f"-Djava.io.tmpdir={ensure_dir(tmpdir)}",
                f"-XX:ErrorFile={log_path.parent}/hs_err_%p.log",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (no threads touch state in between)
        )


def log4j2_config(directory: Path, root: str = "INFO") -> Path:
    path = directory / "log4j2.properties"
    path.write_text(_LOG4J2.format(root=root))
    return path
