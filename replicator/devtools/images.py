"""The product's container images built as shipped (``make image``) and the facts about them.

Owns the engine (Docker where its daemon answers, else podman), the base images (the
registry's, as ``deploy/Dockerfile`` names them, pulled; where the registry cannot be reached,
local stand-ins: a Debian bookworm root file system with Python made by ``mmdebstrap`` from
Debian's packages, and the host's Rust toolchain of the pinned release, each imported once and
kept in the engine's store), the build of both targets (the sidecar and the Spark jobs' image),
and the facts ``make image`` prints: base, size, labels, user, the Python packages inside and
the time from ``run`` to ``/readyz`` 200 beside two Apache Kafka clusters. Podman runs with
:data:`CONTAINERS_CONF` (runc, the host's ulimits), where a sandboxed kernel needs it. The
container tests (``tests/integration/test_images.py``) build through :func:`build_images`.

Nothing here is used by ``replicator run``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from replicator.devtools.apache_kafka import local_clusters
from replicator.devtools.demo import create_replica_topic
from replicator.devtools.embedded import free_port, replicator_environment
from replicator.devtools.jvm import cache_root, ensure_dir
from replicator.errors import ImageError

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
TARGETS = {"sidecar": "replicator", "spark": "replicator-spark"}
"""Each ``deploy/Dockerfile`` target and the repository name its image is tagged with."""

CONTAINERS_CONF = """\
[containers]
# The host's ulimits: podman's defaults exceed what a sandbox's hard limits allow.
default_ulimits = []
[engine]
# runc: crun refuses a kernel that mounts cgroups v1 beside a v2 hierarchy.
runtime = "runc"
"""

_PYTHON_PACKAGES = "python3,python3-venv,python3-pip,python-is-python3,ca-certificates"


@dataclass(frozen=True)
class Engine:
    """A container engine's command line: ``docker`` or ``podman``."""

    name: str

    def command(self, *args: str) -> list[str]:
        return [self.name, *args]

    def env(self) -> dict[str, str]:
        """The environment its commands run with (podman's configuration file)."""
        if self.name != "podman":
            return dict(os.environ)
        conf = ensure_dir(cache_root() / "containers") / "containers.conf"
        if not conf.is_file() or conf.read_text() != CONTAINERS_CONF:
            conf.write_text(CONTAINERS_CONF)
        return {**os.environ, "CONTAINERS_CONF": str(conf)}

    def run(
        self, *args: str, timeout: float = 1800, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args),
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[-3000:]
            raise ImageError(f"{self.name} {args[0]} failed ({done.returncode}): {said}")
        return done

    def exists(self, image: str) -> bool:
        return self.run("image", "inspect", image, check=False, timeout=60).returncode == 0

    def isolation(self) -> list[str]:
        """Build flags: podman builds in a chroot (no nested runtime) with the Docker format,
        which keeps ``HEALTHCHECK``; the host's CA bundle and pip configuration are mounted
        read-only, so pip and cargo inside trust what the host trusts (a file, not the host's
        ``/etc/ssl/certs``: the image's stays writable, Java's keystore is made there)."""
        if self.name != "podman":
            return []
        flags = ["--isolation", "chroot", "--format", "docker"]
        for path in (_CA_BUNDLE, "/etc/pip.conf"):
            if Path(path).is_file():
                flags += ["-v", f"{path}:{path}:ro"]
        return flags


_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def engine() -> Engine:
    """Docker where its daemon answers, else podman; an :class:`ImageError` naming both when
    neither is there."""
    if (
        shutil.which("docker")
        and subprocess.run(
            ["docker", "info"], capture_output=True, check=False, timeout=60
        ).returncode
        == 0
    ):
        return Engine("docker")
    if shutil.which("podman"):
        return Engine("podman")
    raise ImageError("no container engine: neither a docker daemon nor podman (make image-tools)")


def dockerfile_arguments(dockerfile: Path = DOCKERFILE) -> dict[str, str]:
    """The Dockerfile's top-level ``ARG NAME=default`` lines."""
    found = re.findall(r"^ARG (\w+)=(\S+)$", dockerfile.read_text(), flags=re.MULTILINE)
    return dict(found)


def bases(engine: Engine) -> dict[str, str]:
    """The base images to build from: the Dockerfile's own (``PYTHON_IMAGE``, ``RUST_IMAGE``)
    where the engine has or can pull them, else the local stand-ins, imported once."""
    defaults = dockerfile_arguments()
    chosen = {}
    for argument, standin in (("PYTHON_IMAGE", _python_standin), ("RUST_IMAGE", _rust_standin)):
        image = defaults[argument]
        if (
            engine.exists(image)
            or engine.run("pull", image, check=False, timeout=300).returncode == 0
        ):
            chosen[argument] = image
        else:
            chosen[argument] = standin(engine)
    return chosen


def _python_standin(engine: Engine) -> str:
    """A Debian bookworm root file system with Python 3.11, pip and venv, from Debian's
    packages (``mmdebstrap --variant=minbase``): what ``python:3.11-slim-bookworm`` offers the
    Dockerfile."""
    image = "localhost/python:3.11-bookworm"
    if engine.exists(image):
        return image
    if shutil.which("mmdebstrap") is None:
        raise ImageError("the registry's Python image cannot be pulled and mmdebstrap is missing")
    with tempfile.TemporaryDirectory(dir=ensure_dir(cache_root())) as work:
        tar = Path(work) / "python.tar"
        done = subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--include={_PYTHON_PACKAGES}",
                "bookworm",
                str(tar),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        if done.returncode != 0:
            raise ImageError(f"mmdebstrap failed: {done.stderr.strip()[-2000:]}")
        engine.run("import", "--change", "CMD python3", str(tar), image)
    return image


def _rust_standin(engine: Engine) -> str:
    """The host's Rust toolchain where the official image keeps its own (``RUSTUP_HOME`` and
    ``CARGO_HOME`` under ``/usr/local``), without its documentation: what the Dockerfile's
    wheel stage copies out of ``rust:*-slim-bookworm``."""
    rustc = shutil.which("rustc")
    if rustc is None:
        raise ImageError("the registry's Rust image cannot be pulled and there is no rustc here")
    sysroot = Path(_output([rustc, "--print", "sysroot"]))
    version = _output([str(sysroot / "bin" / "rustc"), "--version"]).split()[1]
    image = f"localhost/rust:{version}-bookworm"
    if engine.exists(image):
        return image
    toolchain = f"usr/local/rustup/toolchains/{version}-x86_64-unknown-linux-gnu"
    with tempfile.TemporaryDirectory(dir=ensure_dir(cache_root())) as work:
        tar = Path(work) / "rust.tar"
        with tarfile.open(tar, "w") as out:
            for child in sorted(sysroot.iterdir()):
                if child.name != "share":
                    out.add(child, arcname=f"{toolchain}/{child.name}")
            for tool in ("cargo", "rustc"):
                link = tarfile.TarInfo(f"usr/local/cargo/bin/{tool}")
                link.type = tarfile.SYMTYPE
                link.linkname = f"/{toolchain}/bin/{tool}"
                out.addfile(link, io.BytesIO(b""))
        engine.run("import", str(tar), image)
    return image


def _output(command: Sequence[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def revision() -> str:
    """The git commit built, ``+dirty`` when the tree has changes; ``unknown`` outside git."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


@dataclass(frozen=True)
class Built:
    """An image built: its tag, the bases it was built from and the seconds the build took."""

    target: str
    tag: str
    bases: Mapping[str, str]
    seconds: float


def build_images(
    engine: Engine, tag: str = "dev", targets: Sequence[str] = tuple(TARGETS)
) -> list[Built]:
    """Build each target of ``deploy/Dockerfile`` from the repository as it is (layers cached
    by the engine: an unchanged tree rebuilds in seconds), labelled with pyproject's version
    and the git revision."""
    chosen = bases(engine)
    arguments = [f"--build-arg={name}={image}" for name, image in chosen.items()]
    arguments.append(f"--build-arg=REVISION={revision()}")
    arguments.append(f"--build-arg=VERSION={dockerfile_arguments()['VERSION']}")
    built = []
    for target in targets:
        name = f"{TARGETS[target]}:{tag}"
        started = time.monotonic()
        engine.run(
            "build",
            *engine.isolation(),
            *arguments,
            "--target",
            target,
            "-f",
            str(DOCKERFILE),
            "-t",
            name,
            str(ROOT),
            timeout=3600,
        )
        built.append(Built(target, name, chosen, time.monotonic() - started))
    return built


@dataclass(frozen=True)
class Facts:
    """What an image holds and says about itself."""

    size_mb: float
    user: str
    labels: Mapping[str, str]
    healthcheck: Sequence[str]
    packages: Sequence[str]


_LIST_PACKAGES = (
    "import importlib.metadata as m; "
    "print('\\n'.join(sorted(f\"{d.metadata['Name'].lower()}=={d.version}\" "
    "for d in m.distributions())))"
)


def facts(engine: Engine, image: str) -> Facts:
    """Size, user, labels, health check and the Python distributions of its virtualenv."""
    (inspected,) = json.loads(engine.run("image", "inspect", image).stdout)
    config = inspected.get("Config") or {}
    listed = engine.run(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "/opt/replicator/bin/python",
        image,
        "-c",
        _LIST_PACKAGES,
    ).stdout.split()
    return Facts(
        size_mb=inspected["Size"] / 1e6,
        user=config.get("User", ""),
        labels=config.get("Labels") or {},
        # docker keeps it in Config, podman beside it
        healthcheck=(config.get("Healthcheck") or inspected.get("Healthcheck") or {}).get("Test")
        or [],
        packages=listed,
    )


def seconds_to_ready(engine: Engine, image: str, timeout: float = 120) -> float:
    """The time from ``run`` to ``/readyz`` 200: a read-only sidecar on the host network beside
    two Apache Kafka clusters (local JVMs; dc1 holding ``orders_REPLICA``, so that ready means
    its partitions assigned and resumed), configured by ``REPLICATOR_*`` variables only. Not
    beside the embedded broker: its group coordinator takes 20-30 s to answer a first join."""
    with local_clusters("dc1", "dc2", broker="kafka") as brokers:
        asyncio.run(create_replica_topic(brokers["dc1"]))
        port = free_port()
        env = replicator_environment("dc1", brokers, port, shutdown_grace_ms="5000")
        name = f"replicator-ready-{port}"
        variables = [f"--env={key}={value}" for key, value in env.items()]
        started = time.monotonic()
        engine.run(
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            "--read-only",
            "--tmpfs",
            "/tmp",
            *variables,
            image,
        )
        try:
            _wait_ready(engine, name, port, time.monotonic() + timeout)
            return time.monotonic() - started
        finally:
            engine.run("rm", "--force", "--time", "10", name, check=False)


def _wait_ready(engine: Engine, name: str, port: int, deadline: float) -> None:
    """Poll ``/readyz`` until 200; an :class:`ImageError` with the container's last log lines
    when it exits first or the deadline passes."""
    url = f"http://127.0.0.1:{port}/readyz"
    state = "unknown"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:  # not listening yet, or 503 (an HTTPError)
            pass
        inspected = engine.run("container", "inspect", "--format", "{{.State.Status}}", name)
        state = inspected.stdout.strip()
        if state != "running":
            break
        time.sleep(0.1)
    said = engine.run("logs", "--tail", "20", name, check=False)
    raise ImageError(
        f"the sidecar's {url} did not answer 200 (the container: {state}):"
        f"\n{(said.stdout + said.stderr).strip()[-3000:]}"
    )


def kept_packages(path: Path = ROOT / "deploy" / "image-packages.txt") -> list[str]:
    """The sidecar's package list kept beside the Dockerfile (comments and blanks dropped)."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line.lower() for line in lines if line]


def describe(engine: Engine, image: Built) -> bool:
    """Print an image's facts; for the sidecar, its packages against the list kept beside the
    Dockerfile and its time to ready. False when the packages differ from the list."""
    found = facts(engine, image.tag)
    print(f"{image.tag} ({image.target}): {found.size_mb:.0f} MB, built in {image.seconds:.0f} s")
    for argument, base in image.bases.items():
        print(f"  base {argument}={base}")
    print(f"  user {found.user}, health check {' '.join(found.healthcheck) or 'none'}")
    for key, value in sorted(found.labels.items()):
        print(f"  label {key}={value}")
    print(f"  {len(found.packages)} Python packages")
    if image.target != "sidecar":
        return True
    kept = kept_packages()
    extra = sorted(set(found.packages) - set(kept))
    missing = sorted(set(kept) - set(found.packages))
    verdict = "the same" if not extra and not missing else "DIFFERENT"
    print(f"  packages against deploy/image-packages.txt: {verdict}")
    for name in extra:
        print(f"    + {name} (in the image, not in the list)")
    for name in missing:
        print(f"    - {name} (in the list, not in the image)")
    print(f"  run to /readyz 200: {seconds_to_ready(engine, image.tag):.1f} s")
    return not extra and not missing


def main() -> int:
    """``make image``: build both images and print what they are; 1 when the sidecar's
    packages are not the list kept beside the Dockerfile."""
    started = time.monotonic()
    chosen = engine()
    print(f"engine: {chosen.name}")
    built = build_images(chosen)
    same = [describe(chosen, image) for image in built]
    print(f"make image: {time.monotonic() - started:.0f} s")
    return 0 if all(same) else 1


if __name__ == "__main__":
    raise SystemExit(main())
