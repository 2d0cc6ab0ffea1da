"""The stop deadline: one deadline for every wait of a stop, the whole grace before one."""

from __future__ import annotations

import pytest

from replicator.lifecycle import StopDeadline


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_before_a_stop_a_rebalance_drain_gets_the_whole_grace(clock: Clock) -> None:
    deadline = StopDeadline(20.0, clock)
    clock.now += 100
    assert not deadline.started
    assert deadline.for_drain() == 20.0 and deadline.left() == 20.0


def test_every_wait_of_a_stop_takes_what_is_left_of_one_deadline(clock: Clock) -> None:
    deadline = StopDeadline(20.0, clock)
    deadline.start()
    # The drain leaves a reserve (a quarter of the grace, at most 5 s) for commits and closes.
    assert deadline.for_drain() == 15.0
    clock.now += 12
    assert deadline.for_drain() == 3.0 and deadline.left() == 8.0
    deadline.start()  # a second request keeps the first deadline
    assert deadline.left() == 8.0
    clock.now += 10  # past it: nothing more to drain, a moment to close what answers at once
    assert deadline.for_drain() == 0.0
    assert deadline.left() == StopDeadline.CLOSE_FLOOR_S and deadline.left(floor=0) == 0


def test_a_short_grace_keeps_a_quarter_of_it_for_closing(clock: Clock) -> None:
    deadline = StopDeadline(4.0, clock)
    deadline.start()
    assert deadline.for_drain() == 3.0 and deadline.left() == 4.0
