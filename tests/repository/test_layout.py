"""The package layout shows the architecture: packages by concern, layered, each with its map.

The layers are the order of ``replicator/__init__.py``'s package map: a package imports only from
packages listed before it (or on its own line), never from a later one, so the import graph
between packages is acyclic by construction. import-linter enforces that (``lint-imports``, in
``make lint``), with the other import contracts of pyproject.toml: no cycle among the modules of
a package, aiokafka's internals only in ``replicator.kafka``. The tests here keep the contracts'
layer list equal to the map, show each contract failing on a planted violation, and check the
maps: each package's ``__init__`` docstring names every module in it, and the module map of
docs/development.md names every package and module.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import aiokafka
import pytest

import replicator

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "replicator"
FOUNDATION = {"errors", "clock", "lifecycle"}  # the only modules outside a package


def _layers() -> dict[str, int]:
    """Each package's (or foundation module's) rank, from the package map in the docstring."""
    doc = replicator.__doc__ or ""
    ranks: dict[str, int] = {}
    for rank, line in enumerate(re.findall(r"^``\w+``(?:, ``\w+``)*$", doc, re.M)):
        for name in re.findall(r"``(\w+)``", line):
            ranks[name] = rank
    return ranks


def test_every_module_lives_in_a_package_named_in_the_map() -> None:
    ranks = _layers()
    top_level = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert top_level == FOUNDATION, f"modules outside a package: {sorted(top_level - FOUNDATION)}"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    differ = sorted(set(ranks) ^ (packages | FOUNDATION))
    assert not differ, f"replicator/__init__.py's map and the tree differ: {differ}"


def import_contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def contract(contract_id: str) -> dict[str, Any]:
    (found,) = [c for c in import_contracts() if c["id"] == contract_id]
    return found


def test_the_layers_contract_is_the_package_map() -> None:
    """The import contract's layers, top first, are the package map's lines, bottom first."""
    layers = contract("layers")["layers"]
    ranks = _layers()
    by_rank: dict[int, list[str]] = {}
    for name, rank in ranks.items():
        by_rank.setdefault(rank, []).append(name)
    mapped = [" : ".join(by_rank[rank]) for rank in sorted(by_rank, reverse=True)]
    assert layers == mapped


def test_the_aiokafka_contract_names_every_private_module() -> None:
    """aiokafka's modules are its public API (the package, ``admin``, ``helpers``) or protected:
    a module a new aiokafka adds fails here until it is placed."""
    public = {"admin", "helpers"}
    protected = {
        name.removeprefix("aiokafka.").removesuffix(".*")
        for name in contract("aiokafka-internals")["protected_modules"]
    }
    modules = {m.name for m in pkgutil.iter_modules(aiokafka.__path__)}
    assert protected | public == modules  # "admin" in both: the package public, its modules not
    assert "helpers" not in protected


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the tree at ``root`` (its pyproject.toml, its packages first)."""
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    ("module", "line", "broken", "shown"),
    [
        (
            "model/batching.py",
            "from replicator.cli import main",
            "replicator's packages are layered",
            "replicator.model.batching -> replicator.cli",
        ),
        (
            "model/provenance.py",
            "from replicator.model import batching",
            "no import cycle among the sibling modules",
            "No cycles are allowed in replicator.model",
        ),
        (
            "service/app.py",
            "from aiokafka.protocol.api import Request",
            "aiokafka beyond its public API",
            "replicator.service.app -> aiokafka.protocol.api",
        ),
    ],
    ids=["upward import", "cycle in a package", "aiokafka internals"],
)
def test_a_planted_violation_breaks_its_import_contract(
    tmp_path: Path, module: str, line: str, broken: str, shown: str
) -> None:
    for name in ("replicator", "benchmarks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "replicator" / module).open("a") as source:
        source.write(f"\n{line}  # planted\n")
    done = lint_imports(tmp_path)
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, output
    assert shown in output, output
    assert re.search(rf"{re.escape(broken)}[^\n]*? BROKEN", output), output
    assert output.count(" BROKEN") == (2 if "cli" in line else 1), output


def test_each_package_docstring_maps_its_modules() -> None:
    unmapped: list[str] = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(r"``(\w+)``", doc))
        modules = {p.stem for p in init.parent.glob("*.py")} - {"__init__", "__main__"}
        missing = modules - named
        if missing:
            unmapped.append(f"{init.parent.name}: {sorted(missing)} not in its module map")
    assert not unmapped, "\n".join(unmapped)


def _module_map() -> dict[str, str]:
    """The development page's module map: each package's entry (``  name/  text...``)."""
    page = (ROOT / "docs" / "development.md").read_text()
    block = page[page.index("## Module map") :].split("```", 2)[1]
    entries: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        match = re.match(r"^  (\w+)/\s+(.*)$", line)
        if match:
            current = match.group(1)
            entries[current] = match.group(2)
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
        elif not line.startswith(" "):
            current = ""
    return entries


def test_module_map_names_every_package_and_module() -> None:
    """docs/development.md's map names every package under replicator/ and nothing else, and in
    each package's entry every module of it."""
    entries = _module_map()
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(entries) == packages, (
        f"the module map's packages differ from the tree: lacks "
        f"{sorted(set(packages) - set(entries))}, names {sorted(set(entries) - set(packages))}"
    )
    unnamed: list[str] = []
    for package, text in entries.items():
        words = set(re.findall(r"\w+", text))
        modules = {p.stem for p in (PACKAGE / package).glob("*.py")} - {"__init__", "__main__"}
        unnamed.extend(f"{package}/{m}" for m in sorted(modules - words))
    assert not unnamed, f"the module map lacks {unnamed}"


def test_every_test_file_the_docs_cite_exists() -> None:
    """The guarantees cite their tests by path, or by the name of an integration test file: a
    moved or deleted test file fails here."""
    pages = {p: p.read_text() for p in (ROOT / "docs").rglob("*.md")}
    cited = {path for text in pages.values() for path in re.findall(r"`(tests/[\w/]+\.py)`", text)}
    assert cited, "the docs cite no test file"
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert not missing, f"the docs cite test files that do not exist: {missing}"
    guarantees = pages[ROOT / "docs" / "guarantees.md"]
    named = set(re.findall(r"(?<![/\w])`(test_\w+)`", guarantees))
    files = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    functions = {
        node.name
        for p in (ROOT / "tests").rglob("test_*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    unknown = sorted(name for name in named if name not in files | functions)
    assert not unknown, f"the guarantees cite tests that do not exist: {unknown}"


def test_unit_tests_mirror_the_package_layout() -> None:
    """A unit test of ``replicator/<package>/`` lives in ``tests/unit/<package>/`` (and one of
    the benchmarks' pure pieces in ``tests/unit/benchmarks/``)."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests" / "unit").iterdir() if (p / "__init__.py").is_file()}
    folders -= {"benchmarks"}
    assert folders <= packages, f"test folders with no package: {sorted(folders - packages)}"
    missing = sorted(packages - folders - {"service"})
    assert not missing, f"packages without a unit test folder: {missing}"


# What the data path may take from aiokafka: its value types, never a client or an error.
AIOKAFKA_VALUES = {"TopicPartition", "OffsetAndMetadata"}


def aiokafka_names(path: Path) -> set[str]:
    """What ``path`` imports from aiokafka beyond its value types (``module:name``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {f"{a.name}:*" for a in node.names if a.name.split(".")[0] == "aiokafka"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiokafka":
            names = {a.name for a in node.names}
            if node.module != "aiokafka":
                found |= {f"{node.module}:{name}" for name in names}
            else:
                found |= {f"aiokafka:{name}" for name in names - AIOKAFKA_VALUES}
    return found


def test_the_data_path_holds_no_aiokafka_client() -> None:
    """Modules under ``replication/`` take aiokafka's value types only: the clients they hold
    are the roles of ``replicator.kafka`` (:mod:`replicator.kafka.roles`, the fetch seam of
    :mod:`replicator.kafka.fetching`), so every client call is made through the boundary."""
    modules = sorted((PACKAGE / "replication").glob("*.py"))
    assert len(modules) > 10  # the data path is there to check
    found = {path.name: names for path in modules if (names := aiokafka_names(path))}
    assert found == {}


def test_a_client_imported_into_the_data_path_is_found(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from aiokafka import AIOKafkaConsumer, TopicPartition\nimport aiokafka.errors\n"
    )
    assert aiokafka_names(planted) == {"aiokafka:AIOKafkaConsumer", "aiokafka.errors:*"}
