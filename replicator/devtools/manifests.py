"""The Kubernetes manifests (``deploy/kubernetes``) rendered as an operator renders them.

Owns kustomize: the standalone ``kustomize`` at the pinned release, built once with the Go
toolchain from the Go module proxy into the cache Apache Kafka's jars use (about a minute;
offline afterwards), else ``kubectl kustomize`` where there is no Go; the rendering of an
overlay into its documents; and their split into what ``podman kube play`` runs (a Deployment's
pod with its ConfigMaps), the Secrets it reads from the engine's secret store (podman 4.3 plays
no Secret document), and every other kind, which only a Kubernetes API server runs and the tests
validate against the API's schemas. ``make kustomize`` fetches it; the container tests
(``tests/integration/test_images.py``) and the manifest checks (``tests/repository``) use it.

Nothing here is used by ``replicator run``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from replicator.devtools.jvm import cache_root, ensure_dir
from replicator.errors import ImageError

KUSTOMIZE_VERSION = "v5.8.1"
"""The pinned standalone kustomize: the newest release whose module the Go toolchain here
builds (``go 1.24`` in its go.mod)."""

KUSTOMIZE_MODULE = "sigs.k8s.io/kustomize/kustomize/v5"

PLAYED_KINDS = frozenset({"Deployment", "Pod", "ConfigMap", "PersistentVolumeClaim"})
"""What podman 4.3's ``kube play`` runs; it skips every other kind."""


def kustomize(version: str = KUSTOMIZE_VERSION) -> list[str]:
    """The command that renders a kustomization directory given after it: the pinned
    standalone build (made the first time, where Go is; a directory renamed into place when
    complete, so a concurrent build is harmless), else ``kubectl kustomize`` where kubectl
    carries kustomize (its own release, not the pin)."""
    binary = cache_root() / f"kustomize-{version}" / "kustomize"
    failure = "no go on the PATH to build it"
    if not binary.is_file() and shutil.which("go") is not None:
        try:
            _build(binary.parent, version)
        except ImageError as exc:
            failure = str(exc)
    if binary.is_file():
        return [str(binary), "build"]
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        said = _run([kubectl, "version", "--client"], timeout=60)
        if said.returncode == 0 and "Kustomize Version" in said.stdout:
            return [kubectl, "kustomize"]
    raise ImageError(f"kustomize {version}: {failure}; and no kubectl carrying kustomize")


def _build(home: Path, version: str) -> None:
    go = shutil.which("go") or "go"
    staging = Path(tempfile.mkdtemp(prefix="kustomize-", dir=ensure_dir(cache_root())))
    try:
        env = {**os.environ, "GOBIN": str(staging), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        done = _run([go, "install", f"{KUSTOMIZE_MODULE}@{version}"], env=env, timeout=1800)
        if done.returncode != 0 or not (staging / "kustomize").is_file():
            raise ImageError(f"go install of kustomize {version} failed: {done.stderr[-2000:]}")
        with contextlib.suppress(OSError):  # another process finished first: as good as ours
            staging.rename(home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def render(directory: Path) -> list[dict[str, Any]]:
    """The documents a kustomization directory renders to, in kustomize's order."""
    done = _run([*kustomize(), str(directory)], timeout=300)
    if done.returncode != 0:
        raise ImageError(f"kustomize could not render {directory}: {done.stderr.strip()[-2000:]}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@dataclass
class Rendered:
    """An overlay's documents as podman takes them."""

    played: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    not_played: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, documents: Sequence[dict[str, Any]]) -> Rendered:
        found = cls()
        for doc in documents:
            if doc["kind"] in PLAYED_KINDS:
                found.played.append(doc)
            elif doc["kind"] == "Secret":
                found.secrets.append(doc)
            else:
                found.not_played.append(doc)
        return found


def _run(
    command: list[str], env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, capture_output=True, text=True, check=False, timeout=timeout
    )


def main() -> int:
    """``make kustomize``: make sure the command is there; print which it is."""
    print(" ".join(kustomize()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
