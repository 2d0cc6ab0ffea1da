"""Least privilege on Apache Kafka: exactly the ACLs ``replicator acls`` prints; each missing.

Two clusters with the StandardAuthorizer (SCRAM users, nothing allowed that no ACL grants). The
grants are those ``replicator acls`` prints for the configuration (the ones
``docs/operations/security.md`` explains), applied with Kafka's own AclCommand and nothing more:
every record reaches both clusters exactly, a source that grows grows its destinations, and the
config sync runs without a failure. Then each grant is taken away in turn (these changes made
in one ACL request per cluster), with a replicator started without it: the product says which
operation on which resource of which cluster was refused, readiness is false naming that leg
only (the others keep copying), and once the grant is back everything is delivered exactly,
nothing lost, nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.admin import NewPartitions
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from replicator.devtools.apache_kafka import (
    ApacheKafkaCluster,
    ScramUser,
    Security,
    change_acls,
    grant,
)
from replicator.kafka.admin import AclBinding, describe_acls
from tests.integration.harness import (
    BACKEND,
    ReplicatorProcess,
    Sent,
    Start,
    admin_client,
    configs_set,
    create_topics,
    holds,
    kafka_cluster,
    oracle,
    produce,
    read,
    replicator_cli,
    replicator_env,
    run,
    running,
    wait_settled,
    wait_until,
)

Rows = list[dict[str, Any]]  # what ``replicator acls --json`` prints, one grant a row

pytestmark = pytest.mark.skipif(
    BACKEND != "kafka", reason="SCRAM users and ACLs need Apache Kafka (the default backend)"
)

USERS = {"dc1": ("replicator-dc1", "dc1-acl-pass"), "dc2": ("replicator-from-dc1", "dc2-acl-pass")}


@pytest.fixture(scope="module")
def guarded() -> Iterator[dict[str, ApacheKafkaCluster]]:
    clusters = {
        alias: kafka_cluster(
            alias,
            security=Security(
                users=(ScramUser(user, password, ("SCRAM-SHA-512",)),),
                sasl_plaintext=True,
                acls=True,
            ),
        )
        for alias, (user, password) in USERS.items()
    }
    with running(clusters):
        yield clusters


def guarded_env(clusters: dict[str, ApacheKafkaCluster], **extra: str) -> dict[str, str]:
    """The replicator beside dc1, reaching each cluster as its own SCRAM user."""
    per_cluster: dict[str, str] = {}
    for alias, (user, password) in USERS.items():
        per_cluster[f"clusters__{alias}__bootstrap_servers"] = clusters[alias].listener(
            "SASL_PLAINTEXT"
        )
        per_cluster[f"clusters__{alias}__security_protocol"] = "SASL_PLAINTEXT"
        per_cluster[f"clusters__{alias}__sasl_mechanism"] = "SCRAM-SHA-512"
        per_cluster[f"clusters__{alias}__sasl_username"] = user
        per_cluster[f"clusters__{alias}__sasl_password"] = password
    return replicator_env("dc1", {}, **per_cluster, **extra)


def printed_grants(env: dict[str, str], *topics: str) -> list[dict[str, Any]]:
    """What ``replicator acls --topic ... --json`` prints (before any grant: the principal
    sees no topic yet, so they are named)."""
    named = [arg for topic in topics for arg in ("--topic", topic)]
    status, out, err = replicator_cli(env, "acls", *named, "--json")
    assert status == 0, err
    grants: list[dict[str, Any]] = json.loads(out)["grants"]
    return grants


def resource_args(row: dict[str, Any]) -> tuple[str, ...]:
    args: tuple[str, ...] = (f"--{row['resource']}", row["name"])
    if row["pattern"] == "prefixed":
        args += ("--resource-pattern-type", "prefixed")
    return args


def apply_with_acl_command(clusters: dict[str, ApacheKafkaCluster], rows: Rows) -> None:
    """As an operator applies the printed grants: Kafka's own AclCommand, one row at a time."""
    for row in rows:
        grant(
            clusters[row["cluster"]],
            row["principal"],
            *resource_args(row),
            operations=",".join(row["operations"]),
        )


def _by_cluster(rows: Rows) -> dict[str, list[AclBinding]]:
    bindings: dict[str, list[AclBinding]] = {}
    for row in rows:
        bindings.setdefault(row["cluster"], []).extend(
            AclBinding(
                row["principal"],
                row["resource"],
                row["name"],
                operation,
                prefixed=row["pattern"] == "prefixed",
            )
            for operation in row["operations"]
        )
    return bindings


def apply(clusters: dict[str, ApacheKafkaCluster], rows: Rows) -> None:
    """The rows' grants added, one CreateAcls request per cluster."""
    for alias, bindings in _by_cluster(rows).items():
        change_acls(clusters[alias], add=bindings)


def take_away(clusters: dict[str, ApacheKafkaCluster], rows: Rows) -> None:
    """The rows' grants removed, one DeleteAcls request per cluster."""
    for alias, bindings in _by_cluster(rows).items():
        change_acls(clusters[alias], remove=bindings)


def problems(node: ReplicatorProcess) -> tuple[int, list[str]]:
    status, body = node.get("/readyz")
    return status, [str(p) for p in body.get("problems", [])]


def saying(node: ReplicatorProcess, fragment: str) -> Callable[[], bool]:
    """Whether /readyz answers 503 with a problem holding ``fragment``."""

    def check() -> bool:
        status, found = problems(node)
        return status == 503 and any(fragment in problem for problem in found)

    return check


def only_into_dc2(node: ReplicatorProcess) -> Callable[[], bool]:
    """Whether /readyz names problems of the leg into dc2 only."""

    def check() -> bool:
        _, found = problems(node)
        return bool(found) and all("dc1->dc2" in problem for problem in found)

    return check


def delivered_exactly(
    clusters: dict[str, ApacheKafkaCluster], sent: list[Sent], topic: str, *aliases: str
) -> None:
    for alias in aliases:
        report = oracle(sent, read(clusters[alias], topic), "dc1")
        assert (report.delivered, report.duplicates, report.missing) == (len(sent), 0, []), (
            f"{alias}: {report}"
        )
        assert not report.out_of_order, f"{alias}: {report}"


async def _grow(bootstrap: str, topic: str, partitions: int) -> None:
    admin = await admin_client(bootstrap)
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=partitions)})
    finally:
        await admin.close()


async def _raise_retention(bootstrap: str, topic: str) -> None:
    admin = await admin_client(bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": RETENTION})
        await admin.alter_configs([resource])
    finally:
        await admin.close()


RETENTION = "1234567890"


def retention_synced(cluster: ApacheKafkaCluster, topic: str) -> Callable[[], bool]:
    return lambda: configs_set(cluster, topic).get("retention.ms") == RETENTION


def test_exactly_the_printed_acls_replicate_grow_and_sync_configs(
    replicators: Start, guarded: dict[str, ApacheKafkaCluster]
) -> None:
    """Granted exactly what ``replicator acls`` prints (nothing more), a replicator copies every
    record to both clusters exactly, grows both destinations when the source grows, and follows
    a source config change on both, with no config sync failure and ready throughout."""
    clusters = guarded
    topic = "exact"
    create_topics(clusters["dc1"], None, **{f"{topic}_REPLICA": 2})
    env = guarded_env(clusters, topic_config_sync_interval_ms="1000", topics_include=topic)
    rows = printed_grants(env, f"{topic}_REPLICA")
    assert {(r["cluster"], r["resource"], r["name"]) for r in rows} == {
        ("dc1", "topic", f"{topic}_REPLICA"),
        ("dc1", "topic", topic),
        ("dc2", "topic", topic),
        ("dc1", "group", "replicator.dc1"),
        ("dc1", "group", "replicator.dc1.dc1"),
        ("dc1", "group", "replicator.dc1.dc2"),
        ("dc1", "group", "replicator.dc1.dc1.resume"),
        ("dc2", "group", "replicator.dc1.dc2.resume"),
    }
    apply_with_acl_command(clusters, rows)
    try:
        node = replicators("dc1", env)
        node.wait_ready(timeout=90)
        sent = produce(clusters["dc1"], f"{topic}_REPLICA", 100, partitions=2)
        for alias in ("dc1", "dc2"):
            wait_until(holds(clusters[alias], topic, 100), 90, f"{alias} delivered", node.log)
        run(_grow(clusters["dc1"].bootstrap_servers, f"{topic}_REPLICA", 3))
        run(_raise_retention(clusters["dc1"].bootstrap_servers, f"{topic}_REPLICA"))
        sent += produce(clusters["dc1"], f"{topic}_REPLICA", 60, partitions=3, tag="grown")
        for alias in ("dc1", "dc2"):
            wait_until(holds(clusters[alias], topic, 160), 90, f"{alias} grown", node.log)
            wait_until(retention_synced(clusters[alias], topic), 60, f"{alias} synced", node.log)
        wait_settled(node)
        assert node.get("/readyz")[0] == 200, problems(node)
        assert node.metric("replicator_topic_config_sync_failures_total") == 0
        assert node.stop() == 0
        delivered_exactly(clusters, sent, topic, "dc1", "dc2")
    finally:
        take_away(clusters, rows)


@dataclass(frozen=True)
class Missing:
    """One grant taken away: ``operations`` on ``resource`` of ``cluster`` (``{topic}`` in the
    name is the case's topic); what the product must say; whether dc1's own leg goes on."""

    cluster: str
    resource: str
    name: str
    operations: str
    said: str
    local_leg_goes_on: bool = True
    after_first_records: str | None = None  # "grow" or "configs": refused only then


MISSING = {
    "feed-group-read": Missing(
        "dc1", "group", "replicator.dc1", "Read",
        "Read on group replicator.dc1 denied by the ACLs of dc1", local_leg_goes_on=False,
    ),
    "leg-group": Missing(  # the feed hands its partitions to every leg at once: both wait
        "dc1", "group", "replicator.dc1.dc2", "Read,Describe",
        "Describe on group replicator.dc1.dc2 denied by the ACLs of dc1", local_leg_goes_on=False,
    ),
    "source-read": Missing(
        "dc1", "topic", "{topic}_REPLICA", "Read",
        "Read on topic {topic}_REPLICA denied by the ACLs of dc1", local_leg_goes_on=False,
    ),
    "source-describe-configs": Missing(
        "dc1", "topic", "{topic}_REPLICA", "DescribeConfigs",
        "DescribeConfigs on topic {topic}_REPLICA denied by the ACLs of dc1",
        local_leg_goes_on=False,
    ),
    "destination-create": Missing(
        "dc2", "topic", "{topic}", "Create", "Create on topic {topic} denied by the ACLs of dc2"
    ),
    "destination-write": Missing(
        "dc2", "topic", "{topic}", "Write", "Write on topic {topic} denied by the ACLs of dc2"
    ),
    "destination-read": Missing(
        "dc2", "topic", "{topic}", "Read", "Read on topic {topic} denied by the ACLs of dc2"
    ),
    # AlterConfigs implies DescribeConfigs (Kafka's authorizer): both missing.
    "destination-describe-configs": Missing(
        "dc2", "topic", "{topic}", "DescribeConfigs,AlterConfigs",
        "DescribeConfigs on topic {topic} denied by the ACLs of dc2",
    ),
    "destination-marks": Missing(
        "dc2", "group", "replicator.dc1.dc2.resume", "Read,Describe",
        "on group replicator.dc1.dc2.resume denied by the ACLs of dc2",
        after_first_records="restart",
    ),
    "destination-alter": Missing(
        "dc2", "topic", "{topic}", "Alter", "Alter on topic {topic} denied by the ACLs of dc2",
        after_first_records="grow",
    ),
    "destination-alter-configs": Missing(
        "dc2", "topic", "{topic}", "AlterConfigs",
        "AlterConfigs on topic {topic} denied by the ACLs of dc2", after_first_records="configs",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MISSING))
def test_each_grant_missing_is_named_waits_on_that_leg_and_loses_nothing(
    replicators: Start, guarded: dict[str, ApacheKafkaCluster], case: str
) -> None:
    """Every grant but one: the product says which operation on which resource of which
    cluster was refused (/readyz 503 naming it), dc1's own leg keeps copying where the grant
    is dc2's, and once granted every record is on both clusters exactly."""
    missing, clusters = MISSING[case], guarded
    topic = f"acl-{case}"
    source = f"{topic}_REPLICA"
    create_topics(clusters["dc1"], None, **{source: 2})
    # Only this test's topic: the module's clusters keep the other tests' topics.
    env = guarded_env(clusters, topic_config_sync_interval_ms="1000", topics_include=topic)
    rows = printed_grants(env, source)
    name = missing.name.format(topic=topic)
    (row,) = [r for r in rows if (r["cluster"], r["resource"], r["name"]) == (
        missing.cluster, missing.resource, name)]  # fmt: skip
    taken = {**row, "operations": missing.operations.split(",")}
    assert set(taken["operations"]) <= set(row["operations"]), row
    kept = [op for op in row["operations"] if op not in taken["operations"]]
    # Missing from the start: never granted (no removal racing the replicator's first steps).
    first = rows if missing.after_first_records else [
        {**r, "operations": kept} if r is row else r for r in rows if r is not row or kept
    ]  # fmt: skip
    apply(clusters, first)
    try:
        sent: list[Sent] = []
        node = replicators("dc1", env)
        if missing.after_first_records is not None:
            node.wait_ready(timeout=90)
            sent += produce(clusters["dc1"], source, 40, partitions=2)
            for alias in ("dc1", "dc2"):
                wait_until(holds(clusters[alias], topic, 40), 90, f"{alias} first", node.log)
            wait_settled(node)
            take_away(clusters, [taken])
        if missing.after_first_records == "restart":  # the marks are read when it starts
            assert node.stop() == 0
            node = replicators("dc1", env)
        elif missing.after_first_records == "grow":
            run(_grow(clusters["dc1"].bootstrap_servers, source, 3))
        elif missing.after_first_records == "configs":
            run(_raise_retention(clusters["dc1"].bootstrap_servers, source))
        partitions = 3 if missing.after_first_records == "grow" else 2
        sent += produce(clusters["dc1"], source, 60, partitions=partitions, tag="denied")
        said = missing.said.format(topic=topic)
        node.wait_serving()
        wait_until(saying(node, said), 90, f"/readyz saying {said!r}", node.log)
        if missing.local_leg_goes_on:  # a grant of dc2's: the leg into dc2 only
            wait_until(holds(clusters["dc1"], topic, len(sent)), 90, "dc1's own leg", node.log)
            wait_until(only_into_dc2(node), 30, "dc1's own leg ready", node.log)
            assert saying(node, said)(), problems(node)
        apply(clusters, [taken])
        node.wait_ready(timeout=120)
        for alias in ("dc1", "dc2"):
            wait_until(holds(clusters[alias], topic, len(sent)), 120, alias, node.log)
        wait_settled(node)
        assert node.stop() == 0
        delivered_exactly(clusters, sent, topic, "dc1", "dc2")
    finally:
        take_away(clusters, rows)


def test_describe_acls_reads_literal_and_prefixed_bindings_back_with_their_hosts(
    guarded: dict[str, ApacheKafkaCluster],
) -> None:
    """What the ACL sync reads of a source: every topic binding, its pattern, host and
    permission as granted (one DescribeAcls request), the others' bindings beside them."""
    cluster = guarded["dc2"]
    granted = {
        AclBinding("User:reader-x", "topic", "described-orders", "Read", host="10.1.2.3"),
        AclBinding("User:reader-x", "topic", "described-", "Describe", prefixed=True),
        AclBinding("User:reader-x", "topic", "described-orders", "Write", allow=False),
        AclBinding("User:reader-x", "topic", "described-orders", "All"),
    }
    change_acls(cluster, add=sorted(granted, key=repr))

    async def described() -> list[AclBinding]:
        admin = await admin_client(cluster.bootstrap_servers)
        try:
            return await describe_acls(admin)
        finally:
            await admin.close()

    try:
        found = run(described())
        assert {b for b in found if b.principal == "User:reader-x"} == granted
        assert all(b.resource == "topic" for b in found)
    finally:
        change_acls(cluster, remove=sorted(granted, key=repr))
    assert not [b for b in run(described()) if b.principal == "User:reader-x"]
