"""The membership benchmark's decisions: when every partition is running again after an instance
left or joined, the shares it reports, and how a failed run is worded."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks import brokers
from benchmarks.layout import Layout
from benchmarks.membership import reason, running_again
from benchmarks.scale import parse
from benchmarks.watching import LEGS


def view(**by_leg: dict[str, int]) -> dict[str, Counter[str]]:
    """One instance's gauge: ``near``/``far`` for the legs dc1->dc1 and dc1->dc2."""
    names = dict(zip(("near", "far"), LEGS, strict=True))
    return {names[leg]: Counter(states) for leg, states in by_leg.items()}


def test_every_partition_running_once_over_the_instances_is_running_again() -> None:
    views = [
        view(near={"copying": 3}, far={"copying": 2, "idle": 1}),
        view(near={"copying": 3}, far={"copying": 3}),
    ]
    assert running_again(views, partitions=6) == (True, [6, 6])


@pytest.mark.parametrize(
    "views",
    [
        # One partition of the far leg still starting on its new owner.
        [
            view(near={"copying": 3}, far={"copying": 3}),
            view(near={"copying": 3}, far={"copying": 2, "starting": 1}),
        ],
        # A partition not held by anyone yet (the leaving instance's, mid-rebalance).
        [
            view(near={"copying": 3}, far={"copying": 3}),
            view(near={"copying": 3}, far={"copying": 2}),
        ],
        # A partition counted by two instances: the old owner has not let go yet.
        [
            view(near={"copying": 4}, far={"copying": 3}),
            view(near={"copying": 3}, far={"copying": 3}),
        ],
        # A leg absent from every gauge.
        [view(near={"copying": 3}), view(near={"copying": 3})],
    ],
)
def test_anything_short_of_each_partition_once_past_starting_is_not(
    views: list[dict[str, Counter[str]]],
) -> None:
    done, _ = running_again(views, partitions=6)
    assert not done


def test_shares_count_both_legs_of_each_instance_whatever_their_state() -> None:
    views = [view(near={"starting": 2}, far={"copying": 1}), view(), view(far={"halted": 4})]
    assert running_again(views, partitions=7)[1] == [3, 0, 4]


def test_a_task_groups_errors_are_all_said() -> None:
    group = ExceptionGroup("unhandled", [TimeoutError("3 of 5 arrived"), RuntimeError("gone")])
    assert reason(group) == "3 of 5 arrived; gone"
    assert reason(TimeoutError()) == "TimeoutError()"


def test_the_source_cluster_holds_twice_the_layout() -> None:
    assert Layout.parse("1667x6").most_held == 20_004


@pytest.mark.usefixtures("chosen_broker")
def test_a_cluster_gets_a_node_per_share_of_the_open_file_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One node cannot hold files open for 20,004 partitions here; 12,000 it can."""
    monkeypatch.setattr(brokers, "PARTITIONS_PER_NODE", 15_000)
    parse(["--broker", "kafka"])
    assert [brokers.nodes_for(n) for n in (0, 12_004, 20_004, 45_001)] == [1, 1, 2, 4]
    parse(["--broker", "embedded", "--contenders", "replicator"])
    assert brokers.nodes_for(20_004) == 1


@pytest.mark.usefixtures("chosen_broker")
def test_a_whole_run_moves_instances_in_the_instances_layout_and_a_partial_one_does_not() -> None:
    assert parse([]).membership == "1200"
    assert parse(["--instances-layout", "240"]).membership == "240"
    for partial in (["--quick"], ["--steady"], ["--no-steady"]):
        assert parse(partial).membership == ""
    args = parse(["--steady", "--membership", "1667x6", "--membership-seconds", "90"])
    assert (args.membership, args.membership_seconds) == ("1667x6", 90)


@pytest.mark.usefixtures("chosen_broker")
def test_a_membership_layout_that_is_not_one_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["--membership", "10000"])
    assert exited.value.code == 2
    assert "not a multiple of 6" in capsys.readouterr().err
