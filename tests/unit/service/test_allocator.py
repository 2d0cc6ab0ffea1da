"""The allocator's thresholds: set through ``mallopt`` where the C library has it, and a
refusal or a missing ``mallopt`` said, not hidden."""

from __future__ import annotations

import sys

import pytest

from replicator.service import allocator


class FakeLibrary:
    def __init__(self, refuse: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.refuse = refuse

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 0 if param == self.refuse else 1


def test_both_thresholds_are_set() -> None:
    library = FakeLibrary()
    assert allocator.tune(library) == allocator.Tuning(True)
    assert library.calls == [
        (allocator.M_MMAP_THRESHOLD, allocator.MMAP_THRESHOLD),
        (allocator.M_TRIM_THRESHOLD, allocator.TRIM_THRESHOLD),
    ]


def test_a_refused_threshold_is_named() -> None:
    tuning = allocator.tune(FakeLibrary(refuse=allocator.M_MMAP_THRESHOLD))
    assert not tuning.applied
    assert tuning.reason == f"mallopt(-3, {allocator.MMAP_THRESHOLD}) was refused"


def test_no_mallopt_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "c_library", lambda: None)
    assert allocator.tune() == allocator.Tuning(False, "the C library has no mallopt (not glibc)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_glibc_accepts_the_thresholds() -> None:
    library = allocator.c_library()
    assert library is not None
    assert allocator.tune(library).applied
