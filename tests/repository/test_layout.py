"""The package layout shows the architecture: packages by concern, layered, each with its map.

The layers are the order of ``replicator/__init__.py``'s package map: a package imports only from
packages listed before it (or on its own line), never from a later one, so the import graph
between packages is acyclic by construction. Each package's ``__init__`` docstring names every
module in it, and the module map of docs/development.md names every package and module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import replicator

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "replicator"
FOUNDATION = {"errors", "lifecycle"}  # the only modules outside a package


def _layers() -> dict[str, int]:
    """Each package's (or foundation module's) rank, from the package map in the docstring."""
    doc = replicator.__doc__ or ""
    ranks: dict[str, int] = {}
    for rank, line in enumerate(re.findall(r"^``\w+``(?:, ``\w+``)*$", doc, re.M)):
        for name in re.findall(r"``(\w+)``", line):
            ranks[name] = rank
    return ranks


def _imports(path: Path) -> set[str]:
    """Every ``replicator.*`` module or package ``path`` imports, at any depth (deferred and
    ``TYPE_CHECKING`` imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "replicator" or node.module.startswith("replicator."):
                found.add(node.module)
                found.update(
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if (PACKAGE.parent / f"{node.module}.{alias.name}".replace(".", "/")).is_dir()
                    or (
                        PACKAGE.parent / (f"{node.module}.{alias.name}".replace(".", "/") + ".py")
                    ).is_file()
                )
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("replicator."))
    return found


def _top(module: str) -> str:
    """The package (or foundation module) a dotted ``replicator.*`` name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_lives_in_a_package_named_in_the_map() -> None:
    ranks = _layers()
    top_level = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert top_level == FOUNDATION, f"modules outside a package: {sorted(top_level - FOUNDATION)}"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    differ = sorted(set(ranks) ^ (packages | FOUNDATION))
    assert not differ, f"replicator/__init__.py's map and the tree differ: {differ}"


def test_packages_import_only_from_lower_layers() -> None:
    ranks = _layers()
    upward: list[str] = []
    for path in _sources():
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if own in {"__init__", "__main__"}:
            continue
        for imported in _imports(path):
            other = _top(imported)
            if other and other != own and ranks[other] > ranks[own]:
                upward.append(f"{module} imports {imported} ({other} is above {own})")
    assert not upward, "imports against the layers:\n" + "\n".join(sorted(upward))


def test_the_layering_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check reads deferred imports too: a model module importing the data path is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def later() -> None:\n    from replicator.replication.leg import LegRunner\n")
    assert "replicator.replication.leg" in _imports(probe)
    assert _layers()["replication"] > _layers()["model"]


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
    """A unit test of ``replicator/<package>/`` lives in ``tests/unit/<package>/``."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests" / "unit").iterdir() if (p / "__init__.py").is_file()}
    assert folders <= packages, f"test folders with no package: {sorted(folders - packages)}"
    missing = sorted(packages - folders - {"service"})
    assert not missing, f"packages without a unit test folder: {missing}"
