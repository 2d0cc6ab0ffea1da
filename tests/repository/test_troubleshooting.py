"""The troubleshooting page names real messages: each heading quoting a message (``### `...` ``)
is written by the product and provoked by a test, so that a reworded message fails here until
the page follows it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations" / "troubleshooting.md"
HEADING = re.compile(r"^### `([^`]+)`$", re.MULTILINE)


def _sources(folder: str) -> str:
    """Every Python file under ``folder``, string literals joined across implicit concatenation
    (``"a " "b"`` on two lines reads ``a b``), so a message split over lines is found whole."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / folder).rglob("*.py")))
    return re.sub(r"\"\s*\n\s*f?\"", "", text)


def messages() -> list[str]:
    return HEADING.findall(PAGE.read_text())


def test_the_page_quotes_messages() -> None:
    assert len(messages()) >= 12, messages()


def test_every_message_is_written_by_the_product() -> None:
    product = _sources("replicator")
    missing = [m for m in messages() if m not in product]
    assert not missing, f"not in replicator/ (reworded? update the page): {missing}"


def test_every_message_is_provoked_by_a_test() -> None:
    tests = _sources("tests").replace(PAGE.name, "")
    here = Path(__file__).read_text()
    unprovoked = [m for m in messages() if m not in tests.replace(here, "")]
    assert not unprovoked, f"no test provokes (and asserts) these messages: {unprovoked}"
