"""aiokafka's private surface is one module, and an aiokafka upgrade that breaks it says where.

Everything the product relies on beyond aiokafka's public API is reached through
``replicator/kafka/internals.py`` and listed in its ``CONTRACT``; these tests check that list
against the installed aiokafka (each broken reliance named, with what uses it), that the pin in
pyproject.toml is the version the module supports, and that no other module reaches past an
object's public attributes.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import aiokafka
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.producer.sender import Sender

from replicator.kafka import internals
from replicator.kafka.internals import CONTRACT, Reliance, contract_breaks

ROOT = Path(__file__).resolve().parents[3]
# Private attributes of pyspark's SparkContext: the documented way into Spark's JVM from Python
# (py4j), read by the Spark jobs only.
SPARK_GATEWAY = {"_jvm", "_gateway", "_jsc"}


def test_the_installed_aiokafka_has_everything_the_product_relies_on() -> None:
    broken = contract_breaks()
    assert not broken, "aiokafka changed under the product:\n" + "\n".join(broken)


def test_the_pin_is_the_supported_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [d for d in project["dependencies"] if d.startswith("aiokafka")]
    assert re.search(r"==\s*([\w.]+)", pin) is not None, f"aiokafka is not pinned: {pin}"
    pinned = re.findall(r"==\s*([\w.]+)", pin)[0]
    assert pinned == internals.SUPPORTED_AIOKAFKA == aiokafka.__version__


def test_a_missing_attribute_is_named_with_its_use() -> None:
    """The check can fail: a reliance on what aiokafka lacks is reported, naming the class,
    the attribute and what needs it; an instance attribute assigned in a method is found."""
    gone = Reliance(Sender, "_renamed_in_a_later_release", "the fencing sender")
    message = gone.broken()
    assert message is not None
    assert "aiokafka.producer.sender.Sender" in message
    assert "'_renamed_in_a_later_release'" in message and "the fencing sender" in message
    assigned = Reliance(Sender, "_muted_partitions", "fencing")  # set in __init__ only
    assert not hasattr(Sender, "_muted_partitions") and assigned.broken() is None


def test_every_reliance_is_used_by_the_module() -> None:
    """The list and the module agree: each private name listed is read or written there."""
    source = (ROOT / "replicator" / "kafka" / "internals.py").read_text()
    body = source[source.index("def contract_breaks") :]
    unused = [r.name for r in CONTRACT if r.name.startswith("_") and r.name not in body]
    assert not unused, f"listed but not used by internals.py: {unused}"


def test_no_other_module_reads_a_private_attribute_of_another_object() -> None:
    found: list[str] = []
    for path in sorted((ROOT / "replicator").rglob("*.py")):
        if path.name == "internals.py" and path.parent.name == "kafka":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or node.attr in SPARK_GATEWAY:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "private attributes read outside kafka/internals.py:\n" + "\n".join(found)


async def test_fetched_position_is_unknown_without_an_assignment() -> None:
    """Between two assignments (a rebalance) and for a partition not assigned, no position."""
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")
    tp = TopicPartition("orders", 0)
    assert internals.fetched_position(consumer, tp) is None  # never subscribed
    consumer.subscribe(["orders"])
    assert internals.fetched_position(consumer, tp) is None  # subscribed, nothing assigned yet
    consumer.unsubscribe()
    consumer.assign([tp])
    assert internals.fetched_position(consumer, tp) is None  # assigned, no position fetched
    assert internals.fetched_position(consumer, TopicPartition("orders", 1)) is None
