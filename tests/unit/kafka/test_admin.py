"""The admin adapter: DescribeConfigs answers come back as typed config entries."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from replicator.kafka.admin import ConfigEntry, describe_topic_configs


class DescribingAdmin:
    """Answers DescribeConfigs as aiokafka's admin client does: resource tuples
    ``(error_code, error_message, resource_type, resource_name, entries)``."""

    def __init__(self, resources: list[tuple[Any, ...]]) -> None:
        self.resources = resources

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        return [SimpleNamespace(resources=self.resources)]


async def test_config_entries_are_typed_and_refused_topics_left_out() -> None:
    admin = DescribingAdmin(
        [
            (0, None, 2, "orders", [("retention.ms", "1000", False, 1, False, [])]),
            (0, None, 2, "keys", [("segment.bytes", None, True, 5, True, [])]),
            (29, "denied", 2, "secret", []),
        ]
    )
    found = await describe_topic_configs(admin, ["orders", "keys", "secret"])
    assert found == {
        "orders": [ConfigEntry("retention.ms", "1000", False, 1, False)],
        "keys": [ConfigEntry("segment.bytes", None, True, 5, True)],
    }
    assert found["orders"][0].is_override and not found["orders"][0].is_default
    assert found["keys"][0].is_default
