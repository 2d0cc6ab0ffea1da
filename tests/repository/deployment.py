"""deploy/ and examples/ as the tests read them: env files, YAML, the Dockerfile's stages and the
Compose file, parsed once here for the unit checks and the runs on real brokers.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
EXAMPLES = ROOT / "examples"


def env_file(path: Path) -> dict[str, str]:
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def manifests(path: Path) -> Iterator[dict[str, Any]]:
    yield from (doc for doc in yaml.safe_load_all(path.read_text()) if doc)


def project() -> dict[str, Any]:
    """pyproject.toml's ``[project]`` table."""
    table: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return table


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """A Compose service's bind mounts: path in the container -> path relative to deploy/."""
    return dict(v.split(":")[:2][::-1] for v in service["volumes"])


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form instruction (fails on the shell form)."""
        text = self.arguments
        if self.keyword == "HEALTHCHECK":
            text = text.split(" CMD ", 1)[1]
        value = json.loads(text)
        assert isinstance(value, list), f"{self.keyword} is not in exec form"
        return [str(v) for v in value]


def dockerfile_stages() -> list[list[Instruction]]:
    """The Dockerfile's stages, each a list of instructions (continuations joined)."""
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    stages: list[list[Instruction]] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, arguments = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(Instruction(keyword.upper(), arguments.strip()))
    return stages


def stage_names() -> list[str | None]:
    """Each stage's name (``FROM image AS name``), None for an unnamed one, in order."""
    names: list[str | None] = []
    for stage in dockerfile_stages():
        words = stage[0].arguments.split()
        names.append(words[2] if len(words) == 3 and words[1].upper() == "AS" else None)
    return names


def named_stage(name: str) -> dict[str, list[Instruction]]:
    """The instructions of the named stage, by keyword."""
    found: dict[str, list[Instruction]] = {}
    for instruction in dockerfile_stages()[stage_names().index(name)]:
        found.setdefault(instruction.keyword, []).append(instruction)
    return found


def final_stage() -> dict[str, list[Instruction]]:
    found: dict[str, list[Instruction]] = {}
    for instruction in dockerfile_stages()[-1]:
        found.setdefault(instruction.keyword, []).append(instruction)
    return found


def healthcheck_command() -> list[str]:
    """The image's HEALTHCHECK command (run against a live replicator by the integration tests)."""
    return final_stage()["HEALTHCHECK"][-1].exec_form()


@cache
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(DEPLOY / "docker-compose.yml")
    return loaded
