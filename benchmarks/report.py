"""The performance page's generated tables, rendered from the result files of
``benchmarks/results/`` (:mod:`benchmarks.recording`): for each throughput workload, each
contender's figures from the newest file that measured it, then the runs those figures come
from (commit, time, broker, versions) and the settings every contender ran with.

Owns the rendering (:func:`render`) and the generated block of ``docs/performance/index.md``,
between ``<!-- results:begin -->`` and ``<!-- results:end -->`` (:func:`block`, :func:`replace`);
``tests/repository/test_benchmark_results.py`` fails when the page's block is not what the
files render.

    .venv/bin/python -m benchmarks.report            # print the block
    .venv/bin/python -m benchmarks.report --write    # put it in the page
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from benchmarks.recording import RESULTS, ROOT, load

PAGE = ROOT / "docs" / "performance" / "index.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
BLOCK = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.DOTALL)
ORDER = ("naive", "ceiling", "franz-go", "replicator", "identity flows", "mm2", "mm2-tuned", "mm1")
"""The contenders' order in a table (any other after these, by name)."""

Run = tuple[str, dict[str, Any]]


def _run_name(file_name: str) -> str:
    return file_name.removesuffix(".json")


def _rank(contender: str) -> tuple[int, str]:
    return (ORDER.index(contender) if contender in ORDER else len(ORDER), contender)


def newest_rows(runs: list[Run]) -> dict[str, dict[str, tuple[str, dict[str, Any]]]]:
    """Workload -> contender -> (run, its row) from the newest run that measured it; workloads
    in the order they were first measured."""
    found: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
    for name, document in runs:  # oldest first: a newer run replaces an older row
        for row in document.get("throughput") or []:
            found.setdefault(row["workload"], {})[row["contender"]] = (_run_name(name), row)
    return found


def _number(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, int | float):
        return f"{value:,.{digits}f}" if digits else f"{round(value):,}"
    return str(value)


def _throughput(workload: str, rows: dict[str, tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        f"**{workload}**",
        "",
        "| contender | records | records/s | MB/s | CPU s / M records | peak RSS MB "
        "| start to 1st s | rounds: records/s | output | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for contender in sorted(rows, key=_rank):
        run, row = rows[contender]
        cells = [
            contender,
            _number(row.get("records")),
            _number(row.get("records_per_second")),
            _number(row.get("source_mb_per_second"), 1),
            _number(row.get("cpu_seconds_per_million"), 2),
            _number(row.get("peak_rss_mb")),
            _number(row.get("start_to_first_s") or None, 1),  # 0: not measured (two-way)
            _spread(row.get("rounds") or []),
            str(row.get("verified", "")),
            f"`{run}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _spread(rounds: list[list[float]]) -> str:
    """A median's rounds, as the lowest and highest records/s (the median is in its column)."""
    if len(rounds) < 2:
        return "1" if rounds else "-"
    rates = [rate for rate, _ in rounds]
    return f"{len(rounds)}: {_number(min(rates))} to {_number(max(rates))}"


def _runs_table(used: list[Run]) -> list[str]:
    lines = [
        "| run | commit | when | --quick | broker | replicator | aiokafka | franz-go | Go | Java |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, document in used:
        git, versions = document.get("git", {}), document.get("versions", {})
        commit = f"`{git.get('short', '?')}`" + (" (changed tree)" if git.get("dirty") else "")
        sizes = "yes" if document.get("arguments", {}).get("quick") else "no"
        path = "native" if versions.get("replicator_native_available") else "python"
        cells = [
            f"`{_run_name(name)}`",
            commit,
            str(document.get("time", "?")),
            sizes,
            str(versions.get("broker", document.get("broker", "?"))),
            f"{versions.get('replicator', '?')} ({path} path available)",
            str(versions.get("aiokafka", "?")),
            str(versions.get("franz-go", "-")),
            str(versions.get("go", "-")),
            str(versions.get("java", "?")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _flat(value: Any, prefix: str = "") -> list[str]:
    """``value`` (settings: dicts, lists, scalars) as ``key=value`` items."""
    if isinstance(value, dict):
        if not value:
            return [f"{prefix.rstrip('.')}=none"] if prefix else []
        return [item for key, inner in value.items() for item in _flat(inner, f"{prefix}{key}.")]
    if isinstance(value, list):
        return [f"{prefix.rstrip('.')}={' '.join(map(str, value))}"]
    return [f"{prefix.rstrip('.')}={value}"]


def _settings(newest: dict[str, Run]) -> list[str]:
    lines = []
    for contender in sorted(newest, key=_rank):
        name, document = newest[contender]
        items = _flat(document.get("settings", {}).get(contender, {}))
        shown = ", ".join(f"`{item}`" for item in items) or "its defaults"
        lines.append(f"- **{contender}** (`{_run_name(name)}`): {shown}.")
    return [*lines, ""]


def render(runs: list[Run]) -> str:
    """The generated block for ``runs`` (oldest first, as :func:`benchmarks.recording.load`
    gives them)."""
    header = [
        "<!-- Generated by `python -m benchmarks.report --write` from benchmarks/results/*.json: "
        "edit the files' runs, not this block. -->",
        "",
    ]
    rows = newest_rows(runs)
    if not rows:
        return "\n".join(
            [*header, "No result file in `benchmarks/results/` holds throughput figures yet.", ""]
        )
    intro = (
        "Each contender's figures in each workload from the newest result file that measured it "
        "(`benchmarks/results/`, written by every `benchmarks.run`); the run column names the "
        "file, whose commit, versions and settings follow the tables."
    )
    lines = [*header, intro, ""]
    for workload, by_contender in rows.items():
        lines += _throughput(workload, by_contender)
    used_names = {run for by in rows.values() for run, _ in by.values()}
    used = [(name, doc) for name, doc in runs if _run_name(name) in used_names]
    lines += ["The runs:", "", *_runs_table(used)]
    newest: dict[str, Run] = {}
    for name, document in used:
        for contender in document.get("settings", {}):
            newest[contender] = (name, document)
    if newest:
        lines += ["The contenders' settings in the newest run of each:", "", *_settings(newest)]
    return "\n".join(lines)


def block(page: str) -> str | None:
    """The generated block of ``page`` (between the markers), if it has one."""
    match = BLOCK.search(page)
    return match.group(1) if match else None


def replace(page: str, rendered: str) -> str:
    """``page`` with its generated block replaced by ``rendered``."""
    if block(page) is None:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    return BLOCK.sub(lambda _: f"{BEGIN}\n{rendered}{END}", page, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"replace the block of {PAGE.name}")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the result files' folder")
    args = parser.parse_args(argv)
    rendered = render(load(args.results))
    if not args.write:
        sys.stdout.write(rendered)
        return 0
    PAGE.write_text(replace(PAGE.read_text(), rendered))
    print(f"wrote the generated block of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
