"""The audit's verdict (spark/audit.py ``AuditReport.ok``) and the exit status it becomes: every
fault fails it, a duplicate included; only what the operator allows (``--allow-lag``,
``--allow-duplicates``) is left out, and the report says what was allowed."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from replicator.cli import jobs as cli_jobs
from replicator.cli.commands import app
from replicator.spark.audit import COUNTS, FAILING, Allowed, AuditReport, PartitionReport


def report(**counts: int) -> AuditReport:
    partition = PartitionReport("dc2", "orders", 0, "dc1", expected=10, delivered=10, **counts)
    return AuditReport([partition], snapshot={})


def test_a_clean_report_passes_and_untagged_records_never_fail_it() -> None:
    assert report().ok()
    assert report(untagged=3).ok(), "records written to X directly are not replication's"


@pytest.mark.parametrize("fault", FAILING)
def test_each_fault_alone_fails_the_audit_a_duplicate_included(fault: str) -> None:
    found = report(**{fault: 1})
    assert not found.ok()
    document = found.as_json()
    assert document["ok"] is False and document["failed_by"] == {fault: 1}
    assert document["allowed"] == []


def test_allowed_duplicates_and_lag_pass_and_are_named() -> None:
    doubled = report(duplicates=2)
    assert not doubled.ok(Allowed(lag=True))
    assert doubled.ok(Allowed(duplicates=True))
    assert doubled.as_json(Allowed(duplicates=True))["allowed"] == ["duplicates"]
    assert doubled.as_json(Allowed(duplicates=True))["totals"]["duplicates"] == 2, "still shown"

    behind = report(missing=4, lag=4)
    assert not behind.ok() and behind.ok(Allowed(lag=True))
    # Lag covers only the tail: a record missing before it still fails.
    assert not report(missing=5, lag=4).ok(Allowed(lag=True, duplicates=True))
    assert report(missing=5, lag=4).failures(Allowed(lag=True)) == {"missing": 1}


def test_every_count_is_either_failing_or_named_as_never_failing() -> None:
    never = {"expected", "delivered", "lag", "untagged"}
    assert set(FAILING) | never == set(COUNTS) and not set(FAILING) & never


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], Allowed()),
        (["--allow-duplicates"], Allowed(duplicates=True)),
        (["--allow-lag", "--allow-duplicates"], Allowed(lag=True, duplicates=True)),
    ],
)
def test_the_command_line_hands_the_allowances_to_the_job(
    flags: list[str], expected: Allowed, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("REPLICATOR_")]:
        monkeypatch.delenv(key)
    given: list[Any] = []

    def audit(*args: Any) -> int:
        given.append(args[5])
        return 1

    jobs = SimpleNamespace(audit=audit, SparkSetup=lambda *args: args)
    monkeypatch.setattr(cli_jobs, "spark_jobs", lambda command: jobs)
    env = {
        "REPLICATOR_LOCAL_CLUSTER": "dc1",
        "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:10",
    }
    result = CliRunner().invoke(app, ["audit", *flags], env=env)
    assert result.exit_code == 1, result.output  # the job's verdict is the exit status
    assert given == [expected]
