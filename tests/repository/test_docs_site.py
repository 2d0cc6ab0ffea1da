"""The documentation site builds: ``mkdocs build --strict`` exits 0 (a broken link, a missing
page or a bad anchor fails), every page under ``docs/`` is in the navigation, and README's links
into ``docs/`` name pages that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _nav_pages(entries: Any) -> list[str]:
    """Every page file named in a (nested) mkdocs nav."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in _nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in _nav_pages(value)]
    return []


def _config() -> dict[str, Any]:
    # mkdocs.yml uses no custom YAML tags, so the safe loader reads it
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return config


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    # Not a skip: make test installs the docs extra, and a suite that silently built no site
    # would pass with broken links.
    assert MKDOCS.is_file(), (
        f"mkdocs is not installed beside {sys.executable}: pip install -e '.[docs]'"
    )
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(MKDOCS.parent)},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_config_is_strict_material() -> None:
    config = _config()
    assert config["strict"] is True
    assert config["theme"]["name"] == "material"


def test_every_page_is_in_the_nav_once() -> None:
    """Strict mode only logs a page left out of the nav (at INFO): checked here."""
    nav = _nav_pages(_config()["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == sorted(nav), "a page is in the nav twice"
    assert sorted(nav) == pages, (
        f"not in the nav: {sorted(set(pages) - set(nav))}; "
        f"in the nav but missing: {sorted(set(nav) - set(pages))}"
    )


def test_readme_links_into_docs_name_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", readme)
    assert links, "README links to no docs page"
    missing = sorted(link for link in set(links) if not (ROOT / link).is_file())
    assert not missing, f"README links to missing docs pages: {missing}"
