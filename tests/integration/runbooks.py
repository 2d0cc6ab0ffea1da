"""The documentation's runbooks and sample outputs, executed: what a page says is what was run.

A runbook is a numbered list in a page, after a ``<!-- runbook: NAME -->`` comment, each step a
bold title, prose and fenced ``sh`` blocks. A block's title says where its commands run
(``title="beside dc2"``: with dc2's replicator environment), and a command that exits with
another status than 0 says so in a comment (``# exits 1 ...``). :func:`runbook` reads the steps;
:class:`Operator` runs a block's commands as an operator would, in a shell with ``replicator``
and Apache Kafka's tools on the PATH and the page's host names (``dc1-kafka:9092``,
``dc2-replicator:8080``) pointed at the test's clusters and replicators. The steps a page
describes in prose (stop the producers, lose a datacenter) are the test's own actions, and the
test checks that the page's steps are the ones it performed, in order.

Outputs are kept as samples the pages include (:func:`matches`): compared by shape, written again
with ``REPLICATOR_UPDATE_SAMPLES=1``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
UPDATE = os.environ.get("REPLICATOR_UPDATE_SAMPLES") == "1"


def words(text: str) -> list[str]:
    """The words of an output in order, numbers (counts, offsets, ports, times, ranges such as
    ``4-6``) as ``N`` and temporary paths as ``PATH``; a table's borders and padding, which
    follow the numbers' widths, drop."""
    for scratch in {"/tmp/", tempfile.gettempdir().rstrip("/") + "/"}:
        text = re.sub(re.escape(scratch) + r"\S+", "PATH", text)
    text = re.sub(r"\d+", "N", text)
    text = re.sub(r"\bN(?:[-.:]N)+\b", "N", text)
    return re.findall(r"[A-Za-z_][\w.\-/>]*", text)


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value (list items share ``[]``)."""
    if isinstance(value, dict):
        paths = {prefix} if prefix else set()
        for key, item in value.items():
            paths |= key_paths(item, f"{prefix}.{key}" if prefix else key)
        return paths
    if isinstance(value, list):
        return set().union(*(key_paths(item, f"{prefix}[]") for item in value)) | {prefix}
    return {prefix}


def matches(sample: Path, output: str, shape: bool = True, ignore: str | None = None) -> None:
    """``output`` has the shape of the kept ``sample`` (written instead with UPDATE), parts
    matching the regex ``ignore`` (an error's wording, which depends on how a connection
    failed) left out of both; without ``shape`` (an output whose lines follow timing), the
    caller checks what matters in it."""
    if UPDATE:
        sample.parent.mkdir(exist_ok=True)
        sample.write_text(output)
        return
    assert sample.exists(), f"no sample {sample}: run with REPLICATOR_UPDATE_SAMPLES=1"
    if not shape:
        return
    kept = sample.read_text()
    if sample.suffix == ".json":
        assert key_paths(json.loads(output)) == key_paths(json.loads(kept)), sample.name
        return
    if ignore is not None:
        output_, kept = re.sub(ignore, "", output), re.sub(ignore, "", kept)
    else:
        output_ = output
    assert words(output_) == words(kept), f"{sample.name} changed:\n{output}"


@dataclass(frozen=True)
class Command:
    line: str  # as the page writes it, continuations joined
    status: int  # the exit status the page says it has


@dataclass(frozen=True)
class Block:
    where: str  # the block's title: "beside dc2"
    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Step:
    number: int
    title: str
    blocks: tuple[Block, ...]

    @property
    def commands(self) -> list[Command]:
        return [c for b in self.blocks for c in b.commands]


_STEP = re.compile(r"^(\d+)\. \*\*(.+?)\*\*")
_FENCE = re.compile(r"^\s*```(\w*)(.*)$")
_TITLE = re.compile(r'title="([^"]*)"')
_EXITS = re.compile(r"#\s*exits (\d+)")


def runbook(page: Path, name: str) -> list[Step]:
    """The numbered steps of runbook ``name`` of ``page``, with their shell blocks."""
    lines = page.read_text().splitlines()
    marker = f"<!-- runbook: {name} -->"
    assert marker in lines, f"{page.name} has no {marker}"
    steps: list[Step] = []
    number, title = 0, ""
    blocks: list[Block] = []
    i = lines.index(marker) + 1
    while i < len(lines) and not lines[i].startswith("#") and "<!-- runbook:" not in lines[i]:
        line = lines[i]
        step = _STEP.match(line)
        if step:
            if number:
                steps.append(Step(number, title, tuple(blocks)))
            number, title, blocks = int(step[1]), step[2].rstrip(".,"), []
        fence = _FENCE.match(line)
        if fence:
            assert fence[1] not in ("bash", "shell", "console", "shell-session"), (
                f"{page.name}:{i + 1}: a runbook's commands go in ```sh blocks"
            )
            end = next((j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j])), None)
            assert end is not None, f"{page.name}:{i + 1}: a block that never ends"
            body = [text.strip() for text in lines[i + 1 : end]]
            if fence[1] == "sh":  # another block (an output) is skipped whole
                assert number, f"{page.name}:{i + 1}: commands before step 1"
                where = _TITLE.search(fence[2])
                assert where, f'{page.name}:{i + 1}: a block without title="beside ..."'
                blocks.append(Block(where[1], _commands(body)))
            i = end
        i += 1
    if number:
        steps.append(Step(number, title, tuple(blocks)))
    assert [s.number for s in steps] == list(range(1, len(steps) + 1)), steps
    return steps


def _commands(body: list[str]) -> tuple[Command, ...]:
    joined: list[str] = []
    for line in body:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1].rstrip() + " " + line
        elif line and not line.startswith("#"):
            joined.append(line)
    commands = []
    for line in joined:
        exits = _EXITS.search(line)
        text = line.split(" #", 1)[0].strip() if "#" in line else line
        commands.append(Command(text, int(exits[1]) if exits else 0))
    return tuple(commands)


@dataclass
class Ran:
    command: Command
    status: int
    out: str
    err: str

    @property
    def transcript(self) -> str:
        out = self.out if self.out.endswith("\n") or not self.out else self.out + "\n"
        return f"$ {self.command.line}\n{out}"


# What starts a long-running service rather than a command that ends: handed to the test.
SERVICES = ("connect-mirror-maker.sh", "kafka-mirror-maker.sh")


def service_args(command: Command) -> tuple[str, ...] | None:
    """The command line of a command that runs a service (``replicator run``, ``replicator mm2
    FILE``, ``replicator mirror-maker ...``, MirrorMaker itself), else ``None``."""
    args = tuple(shlex.split(command.line))
    if args[:1] == ("replicator",) and len(args) >= 2:
        mirror = args[1] in ("mm2", "mirror-maker") and "--print-env" not in args
        return args if args[1] == "run" or mirror else None
    return args if args[:1] and args[0] in SERVICES else None


@dataclass
class Operator:
    """Runs a runbook's commands: each datacenter's replicator environment (``envs``, by the
    name after "beside" in a block's title), the page's host names replaced (``hosts``), and
    Apache Kafka's tools (``tools``: a directory of launchers) on the PATH. ``start`` is given
    the command line of a service (:func:`service_args`) to start as the test keeps them."""

    envs: dict[str, dict[str, str]]
    hosts: dict[str, str]
    tools: Path
    workdir: Path
    start: Callable[[str, tuple[str, ...]], None] | None = None
    where_ran: list[tuple[str, Ran]] = field(default_factory=list)  # every command, in order

    def step(self, step: Step, title: str) -> list[Ran]:
        """Run every block of ``step``, whose title the test expects to be ``title``."""
        assert step.title == title, f"step {step.number} is now {step.title!r}, not {title!r}"
        return [ran for block in step.blocks for ran in self.block(block)]

    def block(self, block: Block) -> list[Ran]:
        where = block.where.removeprefix("beside ").strip()
        assert where in self.envs, f"a block titled {block.where!r}: no such datacenter"
        ran = []
        for command in block.commands:
            line = command.line
            for host, actual in self.hosts.items():
                line = line.replace(host, actual)
            service = service_args(command)
            if service is not None:
                assert self.start is not None, f"{command.line}: nothing starts services here"
                self.start(where, tuple(shlex.split(line)))
                result = Ran(command, 0, "", "")
            else:
                result = self._shell(line, where, command)
            self.where_ran.append((where, result))
            ran.append(result)
        return ran

    def _shell(self, line: str, where: str, command: Command) -> Ran:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
        path = f"{Path(sys.executable).parent}:{self.tools}:{clean.get('PATH', '')}"
        done = subprocess.run(
            ["bash", "-c", line],
            env={**clean, **self.envs[where], "PATH": path, "COLUMNS": "120"},
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == command.status, (
            f"{command.line}: exited {done.returncode}, the page says {command.status}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return Ran(command, done.returncode, done.stdout, done.stderr)
