"""The pinned promtool: its Go module version, and a fetched copy used as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.devtools import promtool


def test_a_prometheus_release_maps_to_its_go_module_version() -> None:
    assert promtool.go_version("2.42.0") == "v0.42.0"
    assert promtool.go_version("3.0.1") == "v0.300.1"
    assert promtool.go_version("3.16.0") == "v0.316.0"


def test_a_fetched_promtool_is_used_without_fetching_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_JARS_CACHE", str(tmp_path))
    binary = tmp_path / f"promtool-{promtool.PROMTOOL_VERSION}" / "promtool"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")

    def no_fetch(*args: object, **kwargs: object) -> str:
        raise AssertionError("fetched again")

    monkeypatch.setattr(promtool, "_from_debian", no_fetch)
    monkeypatch.setattr(promtool, "_from_go", no_fetch)
    assert promtool.promtool() == binary
