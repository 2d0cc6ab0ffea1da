"""The franz-go copy loop as a contender of the benchmark (``franz-go``): the Go program of
``benchmarks/gocopy/`` (franz-go, consume every partition from its start, one header added,
produce to the same partition of every destination, idempotent, ``acks=all``, 1 MiB batches,
5 ms linger: :data:`FRANZ_GO_SETTINGS`), built once with the Go toolchain into the cache
(``~/.cache/replicator/gocopy-<hash of its sources>/``) and started as a process watched like
the others (:class:`benchmarks.shared.Monitored`: CPU time and peak RSS from ``/proc``).

Owns the build (:func:`binary`), the start (:func:`start`) and the versions it reports
(:func:`versions`: franz-go's from the binary's build information, the Go toolchain's).

    .venv/bin/python -m benchmarks.franz_go        # build it (or find it built); print its path
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from benchmarks.shared import Monitored, child_env
from replicator.devtools.embedded import LocalBroker
from replicator.devtools.jvm import cache_root

SOURCES = Path(__file__).parent / "gocopy"
FILES = ("go.mod", "go.sum", "main.go")
MODULE = "github.com/twmb/franz-go"

FRANZ_GO_SETTINGS = {
    "header-key": "gocopy",
    "header-value": "0123456789abcdef",
    "batch-max-bytes": str(1 << 20),
    "linger": "5ms",
    "max-buffered-records": "500000",
    "fetch-max-bytes": str(50 << 20),
    "fetch-max-partition-bytes": str(1 << 20),
}
"""The loop's flags (printed and recorded with the figures): one 16-byte header, 1 MiB batches
and 5 ms of linger (the reference loop's), up to 500,000 records buffered per destination
(room for several full batches of every partition in flight), franz-go's fetch defaults
(50 MiB a fetch, 1 MiB a partition). Fixed by the program: no consumer group, acks=all,
idempotent (franz-go's default), no compression (franz-go's default would be snappy)."""


def available() -> bool:
    """Whether the Go toolchain is on the PATH (or the loop is built already)."""
    return shutil.which("go") is not None or _target().exists()


def source_hash() -> str:
    """A digest of the program's sources: its build's name in the cache."""
    digest = hashlib.sha256()
    for name in FILES:
        digest.update(name.encode() + b"\0" + (SOURCES / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _target() -> Path:
    return cache_root() / f"gocopy-{source_hash()}" / "gocopy"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the franz-go contender is built with the Go toolchain: no go on PATH")
    return go


@cache
def binary() -> Path:
    """The built loop: from the cache, else built there by ``go build`` (dependencies through
    the Go module proxy the first time, checked against ``go.sum``)."""
    target = _target()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent)) / "gocopy"
    command = [_go(), "build", "-mod=readonly", "-buildvcs=false", "-trimpath", "-o", str(staging)]
    done = subprocess.run(
        [*command, "."], cwd=SOURCES, capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"go build of {SOURCES} failed:\n{done.stdout}{done.stderr}")
    staging.replace(target)  # atomic: a build finished elsewhere meanwhile is as good
    shutil.rmtree(staging.parent, ignore_errors=True)
    return target


def start(
    source: LocalBroker,
    source_topic: str,
    destinations: list[LocalBroker],
    topic: str,
    records: int,
) -> Monitored:
    """The loop copying ``source_topic`` of ``source`` to ``topic`` of every destination, until
    each acknowledged ``records`` (0: every record, until stopped); it then prints its own
    figures and stays until SIGTERM, so that it is watched and stopped like the others."""
    args = [str(binary()), "--source", source.bootstrap_servers, "--source-topic", source_topic]
    args += ["--destinations", ";".join(d.bootstrap_servers for d in destinations)]
    args += ["--topic", topic, "--records", str(records), "--stay"]
    args += [f"--{flag}={value}" for flag, value in FRANZ_GO_SETTINGS.items()]
    return Monitored(args, child_env(), "franz-go")


@cache
def versions() -> dict[str, str]:
    """franz-go's version (the one the binary was built with) and the Go toolchain's (without
    a toolchain, from ``go.mod``: the version it requires, and no Go version)."""
    found = {"franz-go": "unknown", "go": "unknown"}
    if shutil.which("go") is None:
        for line in (SOURCES / "go.mod").read_text().splitlines():
            fields = line.split()
            if MODULE in fields:
                found["franz-go"] = fields[fields.index(MODULE) + 1]
        return found
    done = subprocess.run(
        [_go(), "version", "-m", str(binary())],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["dep", MODULE] and len(fields) >= 3:
            found["franz-go"] = fields[2]
        elif line.startswith(f"{binary()}:") and len(fields) >= 2:
            found["go"] = fields[1]
    return found


if __name__ == "__main__":
    print(binary())
    print(versions())
