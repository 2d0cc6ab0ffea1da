"""Every command of the CLI documents itself: ``--help`` works everywhere and says something."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main
from typer.testing import CliRunner

from replicator.cli import app

EXPECTED = {"run", "demo", "check-config", "lag", "topics ensure", "backfill", "audit"}


def commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(``"topics ensure"``, command) for every leaf command of a (typer) click group."""
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            yield from commands(command, path + " ")
        else:
            yield path, command


def test_every_command_answers_help_with_its_purpose_and_options() -> None:
    found = dict(commands(typer.main.get_command(app)))
    assert set(found) == EXPECTED
    runner = CliRunner()
    for path, command in found.items():
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert command.help, f"{path} has no help text"
        undocumented = [
            p.name for p in command.params if p.param_type_name == "option" and not p.help
        ]
        assert not undocumented, f"{path}: options without help {undocumented}"


def test_commands_that_print_data_offer_json() -> None:
    found = dict(commands(typer.main.get_command(app)))
    for path in ("check-config", "lag", "topics ensure", "backfill", "audit"):
        options = {o for p in found[path].params for o in getattr(p, "opts", [])}
        assert "--json" in options, path
