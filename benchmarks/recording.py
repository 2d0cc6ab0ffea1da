"""Every benchmark run's figures kept: one JSON file per run of :mod:`benchmarks.run` in
``benchmarks/results/`` (``<UTC timestamp>-<short commit>.json``), holding the figures the run
prints last, with what they were measured on: the commit (full, and whether the tree had
changes), the versions of every contender and tool (:func:`versions`), the settings of every
contender and the command line. :mod:`benchmarks.report` renders the performance page's
generated tables from these files.

Owns the files' place, name and envelope (:func:`write`, :func:`load`) and the provenance
(:func:`git_state`, :func:`versions`); the figures and the settings are the caller's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import replicator
from benchmarks.brokers import broker_name
from replicator.devtools.apache_kafka import KAFKA_VERSION
from replicator.devtools.jvm import java
from replicator.devtools.mirror_makers import MM1_VERSION
from replicator.model import native

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
FORMAT = 1
"""The files' layout version (``format`` in each): raised when a key changes meaning."""


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def git_state() -> dict[str, Any]:
    """The commit measured: its full sha, its short one and whether the work tree differed from
    it (files under ``benchmarks/results/`` aside: earlier runs' files change nothing
    measured)."""
    changes = [
        line
        for line in _git("status", "--porcelain").splitlines()
        if not line[3:].startswith("benchmarks/results/")
    ]
    return {
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "short": _git("rev-parse", "--short", "HEAD") or "unknown",
        "dirty": bool(changes),
        "changed": [line[3:] for line in changes],
    }


def _java_version() -> str:
    try:
        done = subprocess.run(
            [java(), "-version"], capture_output=True, text=True, check=False, timeout=60
        )
    except Exception as exc:  # no Java: say so in the file rather than fail the run
        return f"unavailable ({exc})"
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else "unknown"


def versions(extra: dict[str, str] | None = None) -> dict[str, Any]:
    """What every contender and the harness ran on: the replicator (its version, whether the
    native data path can be loaded and why), aiokafka, Python, the brokers and MirrorMaker 2's
    Kafka (the same jars), MirrorMaker 1's, Java, and ``extra`` (franz-go's and Go's, from
    :func:`benchmarks.franz_go.versions`)."""
    return {
        "replicator": replicator.__version__,
        "replicator_native_available": native.available(),
        "replicator_native_reason": native.reason(),
        "replicator_data_path_of_the_harness": native.active(),
        "aiokafka": metadata.version("aiokafka"),
        "python": sys.version.split()[0],
        "broker": broker_name(),
        "kafka": KAFKA_VERSION,
        "mm2_kafka": KAFKA_VERSION,
        "mm1_kafka": MM1_VERSION,
        "java": _java_version(),
        **(extra or {}),
    }


def write(
    figures: dict[str, Any],
    settings: dict[str, Any],
    arguments: dict[str, Any],
    extra_versions: dict[str, str] | None = None,
    directory: Path = RESULTS,
    now: datetime | None = None,
) -> Path:
    """Write one run's file: ``figures`` (what the run printed last) with the commit, the
    versions, the contenders' ``settings`` and the run's ``arguments``; its path."""
    moment = now or datetime.now(UTC)
    git = git_state()
    document = {
        "format": FORMAT,
        "time": moment.isoformat(timespec="seconds"),
        "git": git,
        "versions": versions(extra_versions),
        "settings": settings,
        "arguments": arguments,
        "argv": sys.argv[1:],
        **figures,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{moment.strftime('%Y%m%dT%H%M%SZ')}-{git['short']}.json"
    path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    return path


def load(directory: Path = RESULTS) -> list[tuple[str, dict[str, Any]]]:
    """Every run's file in ``directory``, oldest first (their names start with the time), as
    (file name, contents)."""
    if not directory.is_dir():
        return []
    return [(path.name, json.loads(path.read_text())) for path in sorted(directory.glob("*.json"))]
