"""Kafka's protocol structs are built at the Kafka boundary only: no module outside
``replicator/kafka/`` imports ``aiokafka.protocol``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "replicator"


def test_protocol_structs_are_built_only_in_the_kafka_package() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "kafka":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            if any(name.startswith("aiokafka.protocol") for name in names):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, "aiokafka.protocol imported outside replicator/kafka/: " + ", ".join(found)
