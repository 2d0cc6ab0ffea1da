"""Prometheus's own ``promtool``, pinned: the tool the test suite checks the alerting rules with
and runs their unit tests through (``tests/repository/test_alerts.py``).

Owns the one fetch, into the cache Apache Kafka's jars use (``$KAFKA_JARS_CACHE``, else
``~/.cache/replicator``), offline once the cache holds it: Debian's ``prometheus`` package when
apt offers it at the pinned release (a download of about 20 MB and an unpack, seconds; no
install, no root, unless apt's package lists are missing and must be read first), else a build
of the same release from the Go module proxy with ``go build`` (minutes: the module graph of
Prometheus is large). Either way the release is the pinned one: the package's version names it,
the Go module version is it (a Go build reports no version of its own).

Nothing here is used by ``replicator run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from replicator.devtools.jvm import cache_root, ensure_dir
from replicator.errors import PromtoolError

PROMTOOL_VERSION = "2.42.0"
"""The pinned Prometheus release: the one Debian 12's ``prometheus`` package carries (stable
updates keep the upstream release), so the fetch is a download; its Go module version below
builds the same release anywhere else."""

GO_MODULE = "github.com/prometheus/prometheus"


def go_version(version: str = PROMTOOL_VERSION) -> str:
    """The Go module version of a Prometheus release: 2.42.0 is ``v0.42.0``, 3.1.0 ``v0.301.0``."""
    major, minor, patch = (int(part) for part in version.split("."))
    return f"v0.{minor if major == 2 else major * 100 + minor}.{patch}"


def promtool(version: str = PROMTOOL_VERSION) -> Path:
    """The path of the pinned ``promtool``, fetched the first time (Debian's package, else a Go
    build); a directory renamed into place when complete, so a concurrent fetch is harmless."""
    home = cache_root() / f"promtool-{version}"
    binary = home / "promtool"
    if binary.is_file():
        return binary
    staging = Path(tempfile.mkdtemp(prefix="promtool-", dir=ensure_dir(cache_root())))
    try:
        failures = [_from_debian(staging, version)]
        if not (staging / "promtool").is_file():
            failures.append(_from_go(staging, version))
        if not (staging / "promtool").is_file():
            raise PromtoolError(f"promtool {version} could not be fetched:\n" + "\n".join(failures))
        # Another process may have finished first: its copy is as good as ours.
        with contextlib.suppress(OSError):
            staging.rename(home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return binary


def _from_debian(staging: Path, version: str) -> str:
    """``promtool`` out of Debian's ``prometheus`` package into ``staging`` when apt has the
    release (``apt-get download`` needs no root; reading missing package lists does); else
    why not."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return "Debian's package: no apt-get or dpkg-deb here"
    work = staging / "deb"
    work.mkdir()
    done = _run(["apt-get", "download", "-q", "prometheus"], cwd=work)
    if done.returncode != 0 and os.geteuid() == 0:
        _run(["apt-get", "update", "-q"])
        done = _run(["apt-get", "download", "-q", "prometheus"], cwd=work)
    packages = sorted(work.glob("prometheus_*.deb"))
    if done.returncode != 0 or not packages:
        return f"Debian's package: apt-get download failed: {done.stderr.strip()[-500:]}"
    if not packages[0].name.startswith(f"prometheus_{version}+"):
        return f"Debian's package is another release: {packages[0].name}"
    unpacked = work / "root"
    done = _run(["dpkg-deb", "-x", str(packages[0]), str(unpacked)])
    if done.returncode != 0:
        return f"Debian's package: dpkg-deb failed: {done.stderr.strip()[-500:]}"
    (unpacked / "usr" / "bin" / "promtool").rename(staging / "promtool")
    shutil.rmtree(work)
    return ""


def _from_go(staging: Path, version: str) -> str:
    """``promtool`` built with Go into ``staging``, from the release's module as the Go module
    proxy serves it; else why not. The build runs inside the module, as its own main module:
    ``go install module@version`` refuses a go.mod with ``replace`` directives, as 2.x's has."""
    go = shutil.which("go")
    if go is None:
        return "Go build: no go on the PATH"
    module = f"{GO_MODULE}@{go_version(version)}"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
    fetched = _run([go, "mod", "download", "-json", module], env=env, timeout=1800)
    if fetched.returncode != 0:
        return f"Go download of {module} failed: {fetched.stdout.strip()[-2000:]}"
    source = json.loads(fetched.stdout)["Dir"]
    command = [go, "build", "-o", str(staging / "promtool"), "./cmd/promtool"]
    done = _run(command, cwd=Path(source), env=env, timeout=3600)
    if done.returncode != 0:
        return f"Go build of {module} failed: {done.stderr.strip()[-2000:]}"
    return ""


def _run(
    command: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=timeout
    )


if __name__ == "__main__":  # ``python -m replicator.devtools.promtool``: fetch it
    print(promtool())
