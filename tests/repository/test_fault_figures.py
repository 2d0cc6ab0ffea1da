"""The fault summary prints only what the tests measured: no row of it (a ``FaultFigures(...)``
built anywhere under ``tests/``) takes its records, losses or duplicates from a number written
into the test, directly or through a name only ever bound to one. A scenario that does not
measure losses or duplicates passes ``None`` (printed "n/m"); its records are always counted."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.fault_figures import NOT_MEASURED, FaultFigures, summary_lines

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# FaultFigures' measured fields: (position, name, whether None, "not measured", is allowed).
MEASURED = ((1, "source_records", False), (2, "lost", True), (3, "duplicates", True))


def _is_literal(node: ast.expr) -> bool:
    """An expression made of constants and operators only (``0``, ``-1``, ``3 * 100``)."""
    return all(
        isinstance(n, ast.Constant | ast.operator | ast.unaryop | ast.UnaryOp | ast.BinOp)
        for n in ast.walk(node)
    )


class _Bindings(ast.NodeVisitor):
    """What each name of one scope is bound to: the expression, or ``None`` where the value
    is computed in a way the check does not follow (a loop target, an augmented assignment,
    a parameter, an unpacking of a call)."""

    def __init__(self) -> None:
        self.values: dict[str, list[ast.expr | None]] = {}

    def bind(self, target: ast.expr, value: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            self.values.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            if values is not None and len(values) != len(target.elts):
                values = None
            for i, element in enumerate(target.elts):
                self.bind(element, None if values is None else values[i])

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.bind(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.bind(node.target, None)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self.bind(node.target, None)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self.values.setdefault(node.arg, []).append(None)


def _scope_of(tree: ast.Module, call: ast.Call) -> list[ast.AST]:
    """The function definitions enclosing ``call``, innermost first, then the module."""
    enclosing: list[ast.AST] = []

    def walk(node: ast.AST, outer: list[ast.AST]) -> bool:
        if node is call:
            enclosing.extend(reversed(outer))
            return True
        inner = (
            [*outer, node] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else outer
        )
        return any(walk(child, inner) for child in ast.iter_child_nodes(node))

    walk(tree, [])
    return [*enclosing, tree]


def _bindings(scope: ast.AST) -> dict[str, list[ast.expr | None]]:
    found = _Bindings()
    if isinstance(scope, ast.Module):
        for statement in scope.body:  # module level only: functions are scopes of their own
            if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.visit(statement)
    else:
        found.visit(scope)
    return found.values


def _written_in(tree: ast.Module, call: ast.Call, value: ast.expr) -> bool:
    """Whether ``value`` is a number written into the test: a literal, or a name whose every
    binding in the nearest scope that binds it is a literal."""
    if _is_literal(value):
        return True
    if not isinstance(value, ast.Name):
        return False
    for scope in _scope_of(tree, call):
        bound = _bindings(scope).get(value.id)
        if bound:
            return all(v is not None and _is_literal(v) for v in bound)
    return False


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return call.args[position] if position < len(call.args) else None


def _is_fault_figures(call: ast.Call) -> bool:
    return (isinstance(call.func, ast.Name) and call.func.id == "FaultFigures") or (
        isinstance(call.func, ast.Attribute) and call.func.attr == "FaultFigures"
    )


def literal_rows(source: str, name: str) -> Iterator[str]:
    """Each measured figure of a ``FaultFigures(...)`` in ``source`` that the test wrote in."""
    tree = ast.parse(source)
    fields = {field for _, field, _ in MEASURED}
    for node in ast.walk(tree):  # a row's figure set afterwards: ``figures.lost = 0``
        if isinstance(node, ast.Assign) and _is_literal(node.value):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr in fields:
                    yield f"{name}:{node.lineno}: {target.attr} set to {ast.unparse(node.value)}"
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call) or not _is_fault_figures(call):
            continue
        if any(keyword.arg is None for keyword in call.keywords):
            continue  # FaultFigures(**row): a row rebuilt from a report, not one built
        for position, field, may_be_none in MEASURED:
            value = _argument(call, position, field)
            if value is None:
                yield f"{name}:{call.lineno}: FaultFigures without {field}"
            elif may_be_none and isinstance(value, ast.Constant) and value.value is None:
                continue  # "not measured", said as such
            elif _written_in(tree, call, value):
                yield f"{name}:{call.lineno}: {field} is {ast.unparse(value)}, not measured"


def fault_figure_rows() -> dict[str, str]:
    """Every test module under ``tests/`` that builds a fault summary row, with its source."""
    return {
        str(path.relative_to(ROOT)): text
        for path in sorted(TESTS.rglob("*.py"))
        if "FaultFigures(" in (text := path.read_text())
        and path != Path(__file__)
        and path != TESTS / "fault_figures.py"
    }


def test_no_fault_summary_row_is_a_literal() -> None:
    modules = fault_figure_rows()
    assert len(modules) >= 4, f"fault summary rows found in {sorted(modules)} only"
    problems = [p for name, text in modules.items() for p in literal_rows(text, name)]
    assert not problems, "\n".join(problems)


def test_the_literal_check_finds_what_it_looks_for() -> None:
    written = """
def test_a(report):
    FaultFigures("a", 100, 0, 0, 1.0, "")
    FaultFigures("b", report.source_records, -0, 2 * 0, 1.0, "")
    lost, duplicates = 0, 0
    FaultFigures("c", len(report.records), lost, duplicates, 1.0, "")
    FaultFigures("d", source_records=300, lost=None, duplicates=None, peak_rss_mb=1, recovery_s="")
    figures = FaultFigures.measured("e", [report], 1.0, "")
    figures.duplicates = 0
"""
    found = list(literal_rows(written, "t.py"))
    lines = ["9", "3", "3", "3", "4", "4", "6", "6", "7"]
    assert [p.split(":")[1] for p in found] == lines, found
    measured = """
TOTAL = len(SENT)
def test_b(report, reports):
    FaultFigures("a", report.source_records, len(report.missing), report.duplicates, 1.0, "")
    duplicates = 0
    for r in reports:
        duplicates += r.duplicates
    FaultFigures("b", TOTAL, None, duplicates, 1.0, "")
    lost, rss = sum(len(r.missing) for r in reports), 1.0
    FaultFigures("c", report.source_records, lost, None, rss, "")
    figures = FaultFigures.measured("d", reports, rss, "")
    figures.source_records = TOTAL
"""
    assert list(literal_rows(measured, "t.py")) == []


def test_the_summary_counts_only_what_was_measured() -> None:
    figures = [
        FaultFigures("measured", 300, 1, 2, 50.0, ""),
        FaultFigures("losses only", 100, 0, None, 70.0, ""),
    ]
    *rows, totals = summary_lines(figures)
    assert NOT_MEASURED in rows[2] and NOT_MEASURED not in rows[1]
    assert totals == (
        "2 scenarios, 400 records, 1 lost (2 measured), 2 duplicates (1 measured), max RSS 70 MB"
    )
