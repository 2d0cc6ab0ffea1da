"""The suite's own contract: ``-m integration`` selects exactly the tests that start brokers
(``tests/integration/``), ``-m "not integration"`` the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collected(marker: str) -> list[str]:
    """The test ids ``pytest -m marker`` would run (collected only, in a fresh process)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-m", marker], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_integration_marker_selects_exactly_the_tests_that_start_brokers() -> None:
    integration, unit = collected("integration"), collected("not integration")
    assert integration and all(t.startswith("tests/integration/") for t in integration)
    assert unit and not any(t.startswith("tests/integration/") for t in unit)
