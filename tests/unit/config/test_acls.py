"""The ACLs a configuration needs (``replicator acls``): exact grants per mode and setting."""

from __future__ import annotations

import pytest

from replicator.config.acls import AclGrant, Pattern, Resource, group_grant, required_acls
from replicator.config.loading import load_settings
from replicator.config.topology import TopicRules, feeds_for

BASE = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "a:1",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "b:1",
}


def grants(listed: list[str], **env: str) -> set[tuple[str, str, str, str, str]]:
    """``(cluster, resource, name, pattern, operations)`` for each grant, with every feed's
    source listing ``listed``."""
    settings = load_settings({**BASE, **{f"REPLICATOR_{k.upper()}": v for k, v in env.items()}})
    selections = {plan.name: plan.rules.select(listed) for plan in feeds_for(settings)}
    return {
        (g.cluster, g.resource.value, g.name, g.pattern.value, ",".join(g.operations))
        for g in required_acls(settings, selections)
    }


DESTINATION = "Read,Write,Create,Describe,Alter,DescribeConfigs,AlterConfigs"


def test_the_replica_mode_needs_its_sources_groups_destinations_and_marks() -> None:
    assert grants(["orders_REPLICA", "orders", "other"]) == {
        ("dc1", "topic", "orders_REPLICA", "literal", "Read,Describe,DescribeConfigs"),
        ("dc1", "group", "replicator.dc1", "literal", "Read,Describe"),
        ("dc1", "group", "replicator.dc1.dc1", "literal", "Read,Describe"),
        ("dc1", "group", "replicator.dc1.dc2", "literal", "Read,Describe"),
        ("dc1", "topic", "orders", "literal", DESTINATION),
        ("dc1", "group", "replicator.dc1.dc1.resume", "literal", "Read,Describe"),
        ("dc2", "topic", "orders", "literal", DESTINATION),
        ("dc2", "group", "replicator.dc1.dc2.resume", "literal", "Read,Describe"),
    }


def test_alter_configs_only_while_the_config_sync_runs() -> None:
    found = grants(["orders_REPLICA"], topic_config_sync_interval_ms="0")
    assert ("dc2", "topic", "orders", "literal", DESTINATION.replace(",AlterConfigs", "")) in found
    assert not any("AlterConfigs" in ops for *_, ops in found)


def test_a_flow_that_places_records_by_key_never_grows_its_destination() -> None:
    flow = {
        "replica_mode": "false",
        "flows__f__source": "dc2",
        "flows__f__target": "dc1",
        "flows__f__preserve_partitions": "false",
        "heartbeat_interval_ms": "0",
    }
    found = grants(["orders"], **flow)
    assert ("dc1", "topic", "orders", "literal", DESTINATION.replace(",Alter,", ",")) in found
    assert ("dc2", "group", "replicator.f", "literal", "Read,Describe") in found
    assert ("dc2", "group", "replicator.f.dc2.dc1", "literal", "Read,Describe") in found
    assert ("dc1", "group", "replicator.f.dc2.dc1.resume", "literal", "Read,Describe") in found


def test_a_flow_s_heartbeats_are_written_where_its_placement_says_and_copied() -> None:
    flow = {
        "replica_mode": "false",
        "flows__f__source": "dc2",
        "flows__f__target": "dc1",
        "flows__f__naming": "source-alias",
    }
    # Written into the source (and read there: copied), before the topic exists too.
    found = grants(["orders"], **flow)
    written = "Read,Write,Create,Describe,DescribeConfigs"
    assert ("dc2", "topic", "heartbeats", "literal", written) in found
    assert ("dc1", "topic", "dc2.heartbeats", "literal", DESTINATION) in found
    # As MirrorMaker 2: into the target; the source's copied only where it exists.
    mm2 = grants(["orders"], **flow, heartbeat_placement="mirrormaker2")
    assert ("dc1", "topic", "heartbeats", "literal", "Read,Write,Create,Describe") in mm2
    assert not any(name.endswith("heartbeats") for cluster, _, name, *_ in mm2 if cluster == "dc2")
    assert not any(name == "dc2.heartbeats" for _, _, name, *_ in mm2)


def test_synced_groups_checkpoints_and_their_commits() -> None:
    found = grants(["orders_REPLICA"], sync_groups="billing.*", sync_group_offsets="true")
    assert ("dc1", "group", "billing", "prefixed", "Describe") in found
    assert ("dc2", "group", "billing", "prefixed", "Read,Describe") in found
    assert ("dc2", "topic", "replicator-checkpoints", "literal", "Read,Write,Create,Describe") in (
        found
    )
    assert not any(name == "replicator-checkpoints" and c == "dc1" for c, _, name, *_ in found)
    describe_only = grants(["orders_REPLICA"], sync_groups="billing")
    assert ("dc2", "group", "billing", "literal", "Describe") in describe_only


def test_records_too_large_parked_need_the_dead_letter_topic_on_each_destination() -> None:
    found = grants(["orders_REPLICA"], record_too_large_policy="dead-letter")
    for cluster in ("dc1", "dc2"):
        assert (cluster, "topic", "replicator.dead-letter", "literal", "Write,Create,Describe") in (
            found
        )


@pytest.mark.parametrize(
    ("regex", "grant"),
    [
        ("billing", ("billing", Pattern.LITERAL)),
        (r"billing\.eu", ("billing.eu", Pattern.LITERAL)),
        ("billing.*", ("billing", Pattern.PREFIXED)),
        (r"billing\..*", ("billing.", Pattern.PREFIXED)),
        ("bill(ing|s)", ("*", Pattern.LITERAL)),
        (".*", ("*", Pattern.LITERAL)),
    ],
)
def test_a_group_regex_becomes_the_narrowest_acl_that_covers_it(
    regex: str, grant: tuple[str, Pattern]
) -> None:
    assert group_grant(regex) == grant


def test_each_grant_says_what_and_why() -> None:
    grant = AclGrant("dc1", Resource.GROUP, "billing", Pattern.PREFIXED, ("Describe",), ("x",))
    assert grant.describe() == "Describe on group prefix billing"
    rules = TopicRules.from_settings(load_settings(BASE))
    assert rules.target("orders_REPLICA") == "orders"


def test_an_acl_sync_reads_acls_on_its_source_and_alters_them_on_its_target() -> None:
    found = grants(["orders_REPLICA"], acl_sync="movable")
    sync = {g for g in found if g[1] == "cluster" or g[2] == "replicator-checkpoints"}
    assert sync == {
        ("dc1", "cluster", "kafka-cluster", "literal", "Describe"),
        ("dc2", "cluster", "kafka-cluster", "literal", "Describe,Alter"),
        ("dc1", "topic", "replicator-checkpoints", "literal", "Read,Describe"),
        ("dc2", "topic", "replicator-checkpoints", "literal", "Read,Write,Create,Describe"),
    }
    assert found - sync == grants(["orders_REPLICA"]), "nothing else changes"
    assert not any(g[1] == "cluster" for g in grants(["orders_REPLICA"]))


def test_the_cluster_grant_is_printed_as_kafka_acls_takes_it() -> None:
    from replicator.cli.operations import kafka_acls_command

    grant = AclGrant(
        "dc2", Resource.CLUSTER, "kafka-cluster", Pattern.LITERAL, ("Describe", "Alter"), ()
    )
    assert grant.describe() == "Describe, Alter on the cluster"
    line = kafka_acls_command(grant, "User:r", "b:1")
    assert line.endswith("--operation Describe --operation Alter --cluster")
