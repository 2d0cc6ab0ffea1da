"""aiokafka's private surface is one module, and an aiokafka upgrade that breaks it says where.

Everything the product relies on beyond aiokafka's public API is reached through
``replicator/kafka/internals.py`` and listed in its ``CONTRACT``; these tests check that list
against the installed aiokafka (each broken reliance named, with what uses it), that the pin in
pyproject.toml is the version the module supports, and that no other module reaches past an
object's public attributes.
"""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer import consumer as consumer_module
from aiokafka.consumer import fetcher
from aiokafka.consumer.subscription_state import SubscriptionState
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


def test_the_fetch_planner_replaces_the_walk_aiokafka_calls_at_each_wake() -> None:
    """aiokafka's fetcher loop asks ``self._get_actions_per_node(assignment)`` for its five
    decisions at each wake, and a position is lost (``await_reset``) only where the planner is
    told of it or visits the partition again: a reset asked by the consumer, a fetch answer, a
    commit lookup (:mod:`replicator.kafka.fetch_planner`)."""
    loop_source = inspect.getsource(fetcher.Fetcher._fetch_requests_routine)
    assert "= self._get_actions_per_node(assignment)" in loop_source
    assert "resume_futures,\n                ) = self._get_actions_per_node" in loop_source
    losing = {
        name
        for name, member in vars(fetcher.Fetcher).items()
        if callable(member) and "await_reset(" in inspect.getsource(member)
    }
    assert losing == {"request_offset_reset", "_proc_fetch_request", "_update_fetch_positions"}
    consumer_source = inspect.getsource(consumer_module)
    assert "await_reset(" not in consumer_source and ".resume()" not in consumer_source
    assert "self._subscription.pause(partition)" in consumer_source
    assert "self._subscription.resume(partition)" in consumer_source


class Told:
    """A fetch planner that notes what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[str, Any]] = []

    def plan(self, assignment: Any) -> internals.FetchActions:
        return [], {}, 0.0, False, []

    def paused(self, tp: TopicPartition) -> None:
        self.told.append(("paused", tp))

    def resumed(self, tp: TopicPartition) -> None:
        self.told.append(("resumed", tp))

    def sought(self, tp: TopicPartition) -> None:
        self.told.append(("sought", tp))

    def resetting(self, tps: Any) -> None:
        self.told.append(("reset", list(tps)))

    def buffered(self, tp: TopicPartition) -> None:
        self.told.append(("buffered", tp))


async def test_the_fetch_planner_is_told_of_pauses_resumes_seeks_resets_and_records() -> None:
    subscription = SubscriptionState()
    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    subscription.assign_from_user(tps)
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")
    owner = fetcher.Fetcher(client, subscription, auto_offset_reset="none")
    owner._fetch_task.cancel()
    parts = internals.note_records(internals.fetcher_parts_of(owner, subscription))
    assert parts.records is owner._records and not parts.resets_by_itself
    planner = Told()
    internals.install_fetch_planner(parts, planner)
    subscription.pause(tps[0])
    subscription.resume(tps[0])
    owner.seek_to(tps[1], 7)
    waiting = owner.request_offset_reset(tps, fetcher.OffsetResetStrategy.EARLIEST)
    owner._records[tps[0]] = "buffered"  # as a fetch answer with records stores them
    assert planner.told == [
        ("paused", tps[0]),
        ("resumed", tps[0]),
        ("sought", tps[1]),
        ("reset", tps),
        ("buffered", tps[0]),
    ]
    assert owner._get_actions_per_node == planner.plan
    assert not subscription.subscription.assignment.state_value(tps[1]).has_valid_position
    waiting.cancel()


@pytest.mark.parametrize("version", [3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("transactional_id", [None, "tx-é"])
def test_a_produce_request_in_pieces_is_the_bytes_aiokafka_encodes(
    version: int, transactional_id: str | None
) -> None:
    from aiokafka.protocol import produce

    struct_class = getattr(produce, f"ProduceRequest_v{version}")
    topics: list[tuple[str, list[tuple[int, bytes | None]]]] = [
        ("orders", [(0, b"\x00batch-zero"), (3, bytes(range(256)) * 40)]),
        ("żółw", [(1, None), (2, b"")]),
        ("empty", []),
    ]
    request = struct_class(transactional_id, -1, 30_000, topics)
    pieces = internals.produce_pieces(request)
    assert b"".join(pieces) == request.encode()
    # Each non-empty batch goes out as the very object it was, never copied.
    batches = [data for _, partitions in topics for _, data in partitions if data]
    assert all(any(piece is batch for piece in pieces) for batch in batches)
