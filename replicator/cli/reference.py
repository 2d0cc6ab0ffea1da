"""The documentation site's reference tables, generated from the code: configuration from the
settings model, metrics from the metric catalogue, the command line from the typer app, the HTTP
endpoints from the routes the server registers.

Each table sits in a page under ``docs/reference/`` between a pair of markers; a unit test fails
when a page differs, and ``python -m replicator.cli.reference --update`` rewrites them.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import typer.main
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from replicator.cli.commands import app
from replicator.config.clusters import ClusterSettings, FlowSettings
from replicator.config.settings import Settings
from replicator.config.values import ENV_PREFIX, NESTED_DELIMITER
from replicator.replication.health import PartitionQuery
from replicator.service import http
from replicator.telemetry.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"


@dataclass(frozen=True)
class Section:
    """A generated part of a documentation page: the page, its markers, what produces it."""

    path: Path
    start: str
    end: str
    generate: Callable[[], str]


def _prose(text: str, cell: bool = False) -> str:
    """``text`` as Markdown shows it literally: outside `code spans`, ``*``, ``<`` and ``>`` are
    escaped (``<topic>`` would be read as an HTML tag, ``a.* b.*`` as emphasis), and in a table
    ``cell`` ``|`` too (inside code spans the table reader leaves it alone)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        part = parts[i].replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = part.replace("|", "\\|") if cell else part
    return "`".join(parts)


def _cell(text: str) -> str:
    return _prose(text, cell=True)


def _code(text: str) -> str:
    return f"`{text}`"


def _default(field: FieldInfo, required: str) -> str:
    """A field's default as an operator writes it in the environment (``true``, not ``True``)."""
    value: Any = field.default
    if value is PydanticUndefined:
        return required
    if value is None:
        return ""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        value = str(value).lower()
    return _code(str(value)) if str(value) else "(empty)"


def anchor(variable: str) -> str:
    """The id of a variable's row: its name in lower case, ``<ALIAS>`` as ``alias``
    (``configuration.md#replicator_clusters__alias__bootstrap_servers``)."""
    return re.sub(r"[^a-z0-9_]", "", variable.lower())


def _row(variable: str, field: FieldInfo, required: str = "(required)") -> str:
    name = f'<a id="{anchor(variable)}"></a>`{variable}`'
    return f"| {name} | {_default(field, required)} | {_cell(field.description or '')} |"


# The settings by purpose, in the order an operator meets them; every field in exactly one.
CONFIGURATION_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Clusters", ("local_cluster", "clusters")),
    (
        "What is replicated",
        ("replica_mode", "topics_include", "topics_exclude", "replica_suffix", "flows"),
    ),
    (
        "Destination topics",
        (
            "destination_replication_factor",
            "topic_config_sync",
            "topic_config_sync_interval_ms",
            "topic_config_defaults_from",
            "topic_configs_exclude",
            "acl_sync",
            "acl_sync_interval_ms",
        ),
    ),
    (
        "Consumer groups and commits",
        ("group_prefix", "instance_id", "group_session_timeout_ms", "commit_interval_ms"),
    ),
    ("Producing", ("idempotence", "compression", "linger_ms", "batch_max_bytes", "data_path")),
    (
        "Fetching and buffering",
        (
            "fetch_max_bytes",
            "max_partition_fetch_bytes",
            "fetch_max_wait_ms",
            "fetch_idle_max_wait_ms",
            "partition_queue_max_records",
            "partition_queue_max_bytes",
            "detach_after_ms",
        ),
    ),
    (
        "Timeouts",
        (
            "request_timeout_ms",
            "metadata_max_age_ms",
            "probe_timeout_ms",
            "send_stall_timeout_ms",
            "shutdown_grace_ms",
        ),
    ),
    (
        "Faults and bad records",
        ("offset_reset_policy", "record_too_large_policy", "dead_letter_topic"),
    ),
    ("Heartbeats", ("heartbeat_interval_ms", "heartbeat_placement", "heartbeat_topic")),
    (
        "Consumer-group failover",
        (
            "sync_groups",
            "sync_groups_interval_ms",
            "sync_group_offsets",
            "mm2_checkpoints",
            "checkpoints_topic",
        ),
    ),
    ("HTTP and logs", ("http_host", "http_port", "log_level", "log_format")),
)


def _rows(name: str, field: FieldInfo) -> list[str]:
    """One setting's rows: one, or one per field of a cluster's or a flow's block."""
    blocks: dict[str, tuple[type[BaseModel], str, str]] = {
        "clusters": (ClusterSettings, "<ALIAS>", "cluster"),
        "flows": (FlowSettings, "<NAME>", "flow"),
    }
    if name not in blocks:
        return [_row(ENV_PREFIX + name.upper(), field)]
    model, key, each = blocks[name]
    prefix = f"{ENV_PREFIX}{name.upper()}{NESTED_DELIMITER}{key}{NESTED_DELIMITER}"
    return [
        _row(prefix + block_name.upper(), block_field, f"(required, one per {each})")
        for block_name, block_field in model.model_fields.items()
    ]


def configuration_table() -> str:
    """Every ``REPLICATOR_*`` variable: name (with its anchor), default and meaning, a table per
    purpose (:data:`CONFIGURATION_GROUPS`)."""
    placed = [name for _, names in CONFIGURATION_GROUPS for name in names]
    fields = Settings.model_fields
    if sorted(placed) != sorted(fields):
        raise ValueError(
            f"CONFIGURATION_GROUPS must place every setting once: missing "
            f"{sorted(set(fields) - set(placed))}, unknown {sorted(set(placed) - set(fields))}, "
            f"twice {sorted({n for n in placed if placed.count(n) > 1})}"
        )
    parts = []
    for title, names in CONFIGURATION_GROUPS:
        rows = ["| variable | default | meaning |", "|---|---|---|"]
        rows += [row for name in names for row in _rows(name, fields[name])]
        parts.append(f"## {title}\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def metrics_table() -> str:
    """Every exported metric: name, type, labels and meaning, in declaration order."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for spec in Metrics().catalogue:
        labels = ", ".join(f"`{label}`" for label in spec.labels)
        rows.append(f"| `{spec.name}` | {spec.kind} | {labels} | {_cell(spec.help)} |")
    return "\n".join(rows)


def _cli() -> Any:
    """The ``replicator`` command as typer's click sees it (typed ``Any``: typer builds it with a
    click of its own)."""
    return typer.main.get_command(app)


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    """Every command under ``group`` with its full name, sub-groups flattened, in their order."""
    ctx = group.context_class(group, info_name=prefix.rsplit(" ", 1)[-1])
    found: list[tuple[str, Any]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        if hasattr(command, "list_commands"):
            found.extend(_commands(command, path))
        else:
            found.append((path, command))
    return found


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _param(param: Any) -> str:
    if param.param_type_name == "argument":
        name = (param.metavar or param.name or "").upper()
        kind = "(argument, required)" if param.required else "(argument)"
        return f"| `{name}` | {kind} | {_cell(_one_line(param.help or ''))} |"
    names = " / ".join(f"`{opt}`" for opt in (*param.opts, *param.secondary_opts))
    default = param.default
    shown = ""
    if param.required:
        shown = "(required)"
    elif default is True:
        shown = _code(param.opts[0])  # on unless --no-... is given
    elif default not in (None, (), [], "") and not (param.is_flag and default is False):
        shown = _code(str(default))
    return f"| {names} | {shown} | {_cell(_one_line(param.help or ''))} |"


def cli_reference() -> str:
    """Every command of ``replicator``: its synopsis, help text and options, in the app's order."""
    root = _cli()
    parts = [f"`replicator`: {_prose(_one_line(root.help or ''))}"]
    root_options = [p for p in root.params if not getattr(p, "hidden", False)]
    if root_options:
        rows = ["| option | default | meaning |", "|---|---|---|"]
        rows.extend(_param(p) for p in root_options)
        parts.append("Options of `replicator` itself, before any command:\n\n" + "\n".join(rows))
    for path, command in _commands(root, "replicator"):
        arguments = [
            (p.metavar or p.name or "").upper()
            for p in command.params
            if p.param_type_name == "argument"
        ]
        extra = (
            ["[MIRRORMAKER OPTIONS...]"] if command.context_settings.get("allow_extra_args") else []
        )
        synopsis = " ".join([path, "[OPTIONS]", *arguments, *extra])
        help_text = _prose(inspect.cleandoc(command.help or ""))
        parts.append(f"### `{path}`\n\n```\n{synopsis}\n```\n\n{help_text}")
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        rows = ["| option | default | meaning |", "|---|---|---|"]
        rows.extend(_param(p) for p in params)
        rows.append("| `--help` | | Show the command's help and exit. |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


class _Silent:
    """Enough of a service to build the HTTP app and read its routes."""

    def liveness_problems(self) -> list[str]:
        return []

    def readiness_problems(self, local_only: bool = False) -> list[str]:
        return []

    def status(self, detail: PartitionQuery | None = None) -> dict[str, Any]:
        return {}

    def metrics_exposition(self) -> bytes:
        return b""


def _endpoint_descriptions() -> dict[str, str]:
    """The ``- ``/path``: text`` bullets of the HTTP module's docstring, by path."""
    described: dict[str, str] = {}
    for bullet in re.split(r"\n(?=- ``/)", (http.__doc__ or "").split("\n\n")[1]):
        match = re.match(r"- ``(/[\w/]*)``: (.*)", bullet, re.S)
        if match:
            text = _one_line(match.group(2)).replace("``", "`")
            described[match.group(1)] = text
    return described


def http_endpoints() -> str:
    """Every route the HTTP server registers, with what its module docstring says it answers."""
    described = _endpoint_descriptions()
    rows = ["| method | path | answers |", "|---|---|---|"]
    methods: dict[str, list[str]] = {}
    for route in http.build_app(_Silent()).router.routes():
        path = route.resource.canonical if route.resource else ""
        methods.setdefault(path, []).append(route.method)
    for path, verbs in methods.items():
        rows.append(f"| {', '.join(verbs)} | `{path}` | {_cell(described.get(path, ''))} |")
    return "\n".join(rows)


def _markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- {name} reference: generated by python -m replicator.cli.reference -->",
        f"<!-- end of {name} reference -->",
    )


CONFIGURATION = Section(
    REFERENCE / "configuration.md", *_markers("configuration"), configuration_table
)
METRICS = Section(REFERENCE / "metrics.md", *_markers("metrics"), metrics_table)
CLI = Section(REFERENCE / "cli.md", *_markers("command line"), cli_reference)
HTTP = Section(REFERENCE / "http.md", *_markers("HTTP"), http_endpoints)
SECTIONS = (CONFIGURATION, METRICS, CLI, HTTP)


def generated_part(text: str, section: Section) -> str:
    """The generated part of a page's text (empty if its markers are missing)."""
    if section.start not in text or section.end not in text:
        return ""
    return text.split(section.start, 1)[1].split(section.end, 1)[0].strip()


def update(sections: tuple[Section, ...] = SECTIONS) -> list[Path]:
    """Rewrite every generated part of ``sections``' pages; the pages that changed."""
    changed: list[Path] = []
    for section in sections:
        original = section.path.read_text()
        before, rest = original.split(section.start, 1)
        _, after = rest.split(section.end, 1)
        text = f"{before}{section.start}\n{section.generate()}\n{section.end}{after}"
        if text != original:
            section.path.write_text(text)
            changed.append(section.path)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        pages = update()
        for page in pages:
            print(f"updated {page.relative_to(ROOT)}", file=sys.stderr)
        if not pages:
            print("the reference pages are already current", file=sys.stderr)
    else:
        print("\n\n".join(section.generate() for section in SECTIONS))
