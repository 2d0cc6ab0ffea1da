"""Topic ACL sync on Apache Kafka with its StandardAuthorizer, binding by binding.

- An MM2 file with the default ``sync.topic.acls.enabled``: MirrorMaker 2 itself (Kafka's own
  release) runs it first on two clusters, then ``replicator mm2`` runs the same file on the same
  clusters, its target's bindings removed first; the target ends with the same bindings, and what
  MirrorMaker 2 left out or changed without a word is said once per binding. Then the sync
  follows an added binding, a removed one, and, across a restart, one removed while it was down;
  an operator's own binding on the target is never touched, and the records are copied exactly.
- The ``_REPLICA`` mode's ``movable`` policy both ways, one replicator per datacenter: the sync
  of dc1 at first lacks ``Alter`` on dc2's cluster and says so on that sync only while records go
  on; once granted, every binding of either side is on both, and one removed in dc1 is removed in
  dc2 and never brought back by the sync facing it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from replicator.devtools.apache_kafka import (
    ApacheKafkaCluster,
    ScramUser,
    Security,
    change_acls,
)
from replicator.devtools.mirror_makers import mm2_test_properties, properties_text, start_mm2
from replicator.kafka.admin import AclBinding, describe_acls
from tests.integration.harness import (
    BACKEND,
    ReplicatorProcess,
    Start,
    admin_client,
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
    wait_until,
)

pytestmark = pytest.mark.skipif(
    BACKEND != "kafka", reason="ACLs need Apache Kafka's authorizer (the default backend)"
)

USER, PASSWORD = "replicator-dc1", "acl-sync-pass"


@pytest.fixture(scope="module")
def authorized() -> Iterator[dict[str, ApacheKafkaCluster]]:
    """Two clusters with the StandardAuthorizer; the harness (and MirrorMaker 2) use the
    PLAINTEXT listener, a super user; a SCRAM user with no ACL but those a test grants."""
    security = Security(
        users=(ScramUser(USER, PASSWORD, ("SCRAM-SHA-512",)),), sasl_plaintext=True, acls=True
    )
    clusters = {alias: kafka_cluster(alias, security=security) for alias in ("dc1", "dc2")}
    with running(clusters):
        yield clusters


def topic_acls(cluster: ApacheKafkaCluster, test: str) -> set[AclBinding]:
    """The topic bindings of the cluster on the names of one ``test`` (its topics, their
    remote topics, prefixes of them), but the replicator's own grants."""

    async def described() -> list[AclBinding]:
        admin = await admin_client(cluster.bootstrap_servers)
        try:
            return await describe_acls(admin)
        finally:
            await admin.close()

    return {
        b
        for b in run(described())
        if b.principal != f"User:{USER}" and b.name.removeprefix("dc1.").startswith(NAMES[test])
    }


NAMES = {"mm2": ("orders", "ord", "payments"), "movable": ("stock", "sto")}


def acls_are(
    cluster: ApacheKafkaCluster, test: str, expected: set[AclBinding]
) -> Callable[[], bool]:
    return lambda: topic_acls(cluster, test) == expected


def on(topic: str, principal: str, operation: str, **kind: Any) -> AclBinding:
    return AclBinding(f"User:{principal}", "topic", topic, operation, **kind)


def acl_status(node: ReplicatorProcess, sync: str) -> dict[str, Any]:
    status, body = node.get("/status")
    assert status == 200
    found: dict[str, Any] = (body.get("acl_sync") or {}).get(sync, {})
    return found


def events(node: ReplicatorProcess, event: str) -> list[dict[str, Any]]:
    found = []
    for line in node.log().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            found.append(entry)
    return found


# The five bindings MirrorMaker 2 was measured with, each of another principal, and two that
# concern no replicated topic.
SOURCE = {
    on("orders", "reader", "Read"),
    on("orders", "owner", "All"),
    on("orders", "intern", "Read", allow=False),
    on("orders", "writer", "Write"),
    on("ord", "team", "Read", prefixed=True),
    on("payments", "reader", "Read"),
    AclBinding("User:reader", "group", "readers", "Read"),
}
OPERATORS = on("dc1.orders", "ops", "Describe")  # the target's own, before any sync


def test_an_mm2_file_keeps_the_acls_mirror_maker_2_keeps_then_follows_changes(
    replicators: Start, authorized: dict[str, ApacheKafkaCluster], tmp_path: Path
) -> None:
    dc1, dc2 = authorized["dc1"], authorized["dc2"]
    create_topics(dc1, None, orders=2, payments=1)
    change_acls(dc1, add=sorted(SOURCE, key=repr))
    properties = mm2_test_properties({"dc1": dc1.bootstrap_servers, "dc2": dc2.bootstrap_servers})
    del properties["sync.topic.acls.enabled"]  # MirrorMaker 2's default: true
    properties |= {"dc1->dc2.enabled": "true", "dc1->dc2.topics": "orders"}
    file = tmp_path / "connect-mirror-maker.properties"
    file.write_text(properties_text(properties))
    sent = produce(dc1, "orders", 40, partitions=2)
    mirror_maker = start_mm2(file, tmp_path / "mm2")
    try:
        wait_until(
            lambda: len(topic_acls(dc2, "mm2")) >= 3, 120, "MirrorMaker 2 synced", mirror_maker.log
        )
        wait_until(holds(dc2, "dc1.orders", 40), 120, "MirrorMaker 2 copied", mirror_maker.log)
        made_by_mm2 = topic_acls(dc2, "mm2")
    finally:
        assert mirror_maker.stop() in (0, 143)
    assert made_by_mm2 == {
        on("dc1.orders", "reader", "Read"),
        on("dc1.orders", "owner", "Read"),  # ALLOW All turned into Read
        on("dc1.orders", "intern", "Read", allow=False),
    }, "MirrorMaker 2's ACL sync is not what it was measured to be"

    change_acls(dc2, remove=sorted(made_by_mm2, key=repr), add=[OPERATORS])
    sent += produce(dc1, "orders", 40, partitions=2, tag="after")
    env = replicator_env("dc2", {}, acl_sync_interval_ms="1000")
    node = replicators("dc2", env, ("mm2", str(file)))
    node.wait_ready(timeout=90)
    wait_until(acls_are(dc2, "mm2", made_by_mm2 | {OPERATORS}), 60, "the same ACLs", node.log)
    first_run = node
    said = acl_status(node, "dc1->dc2")
    assert (said["copied"], said["owned"], said["skipped"], said["downgraded"]) == (3, 3, 2, 1)
    assert said["policy"] == "mm2" and said["last_error"] is None
    reasons = {entry["binding"]: entry["reason"] for entry in said["left_out_or_changed"]}
    assert "ALLOW Write" in reasons["ALLOW Write on topic orders for User:writer from *"]
    assert "prefixed" in reasons["ALLOW Read on prefixed topic ord for User:team from *"]
    assert "becomes ALLOW Read" in reasons["ALLOW All on topic orders for User:owner from *"]
    # follows: a binding added, two removed (one whose copy another binding still wants)
    added = on("orders", "bi", "Describe")
    change_acls(dc1, add=[added], remove=[on("orders", "intern", "Read", allow=False)])
    expected = {
        on("dc1.orders", "reader", "Read"),
        on("dc1.orders", "owner", "Read"),
        on("dc1.orders", "bi", "Describe"),
        OPERATORS,
    }
    wait_until(acls_are(dc2, "mm2", expected), 30, "an addition and a removal followed", node.log)
    assert node.stop() == 0
    # Removed while no replicator ran: the ledger in dc2's checkpoints topic says it was the
    # sync's, so the next replicator removes it; the operator's stays.
    change_acls(dc1, remove=[on("orders", "reader", "Read")])
    node = replicators("dc2", env, ("mm2", str(file)))
    node.wait_ready(timeout=90)
    expected.discard(on("dc1.orders", "reader", "Read"))
    wait_until(acls_are(dc2, "mm2", expected), 30, "removed after a restart", node.log)
    wait_until(holds(dc2, "dc1.orders", 80), 60, "every record", node.log)
    assert node.stop() == 0
    # each left-out or changed binding said once, in the first run and in the second
    for run_ in (first_run, node):
        assert len(events(run_, "topic ACL binding skipped")) == 2
        assert len(events(run_, "topic ACL binding downgraded")) == 1
    topics_of_source = {b for b in SOURCE if b.resource == "topic"}
    assert topic_acls(dc1, "mm2") == (topics_of_source | {added}) - {
        on("orders", "intern", "Read", allow=False),
        on("orders", "reader", "Read"),
    }, "the source's ACLs are the operator's alone"
    # MirrorMaker 2's copies carry no provenance: every record once, by content
    copied = sorted((r.key, r.value) for r in read(dc2, "dc1.orders"))
    assert copied == sorted((s.key, s.value) for s in sent)
    change_acls(dc1, remove=sorted(SOURCE | {added}, key=repr))
    change_acls(dc2, remove=sorted(topic_acls(dc2, "mm2"), key=repr))


def test_movable_acls_both_ways_a_refused_grant_named_and_a_removal_never_undone(
    replicators: Start, authorized: dict[str, ApacheKafkaCluster]
) -> None:
    dc1, dc2 = authorized["dc1"], authorized["dc2"]
    for cluster in (dc1, dc2):
        create_topics(cluster, None, stock_REPLICA=2)
    app = {
        on("stock_REPLICA", "app", "Write"),
        on("stock", "app", "Read", host="10.0.0.9"),
        on("sto", "app", "Describe", prefixed=True),
    }
    bi = on("stock", "bi", "Read")
    change_acls(dc1, add=sorted(app, key=repr))
    change_acls(dc2, add=[bi])
    base = {"topics_include": "stock", "acl_sync": "movable", "acl_sync_interval_ms": "1000"}
    # dc1's replicator as its SCRAM user, granted what `replicator acls` prints but Alter on
    # dc2's cluster; dc2's as the super user.
    sasl: dict[str, str] = {}
    for alias, cluster in authorized.items():
        sasl |= {
            f"clusters__{alias}__bootstrap_servers": cluster.listener("SASL_PLAINTEXT"),
            f"clusters__{alias}__security_protocol": "SASL_PLAINTEXT",
            f"clusters__{alias}__sasl_mechanism": "SCRAM-SHA-512",
            f"clusters__{alias}__sasl_username": USER,
            f"clusters__{alias}__sasl_password": PASSWORD,
        }
    env1 = replicator_env("dc1", {}, **base, **sasl)
    status, out, err = replicator_cli(env1, "acls", "--topic", "stock_REPLICA", "--json")
    assert status == 0, err
    rows = json.loads(out)["grants"]
    cluster_rows = {
        (r["cluster"], tuple(r["operations"])) for r in rows if r["resource"] == "cluster"
    }
    assert cluster_rows == {("dc1", ("Describe",)), ("dc2", ("Describe", "Alter"))}
    grants = {
        alias: [
            AclBinding(
                r["principal"], r["resource"], r["name"], op, prefixed=r["pattern"] == "prefixed"
            )
            for r in rows
            if r["cluster"] == alias
            for op in r["operations"]
        ]
        for alias in ("dc1", "dc2")
    }
    alter = AclBinding(f"User:{USER}", "cluster", "kafka-cluster", "Alter")
    ledger = [g for g in grants["dc1"] if g.name == "replicator-checkpoints"]
    assert {g.operation for g in ledger} == {"Read", "Describe"}
    change_acls(dc1, add=[g for g in grants["dc1"] if g not in ledger])
    change_acls(dc2, add=[g for g in grants["dc2"] if g != alter])
    nodes = {
        "dc1": replicators("dc1", env1),
        "dc2": replicators(
            "dc2",
            replicator_env("dc2", {"dc1": dc1, "dc2": dc2}, **base),
        ),
    }
    for node in nodes.values():
        node.wait_ready(timeout=90)

    def sync_error(fragment: str) -> Callable[[], bool]:
        return lambda: fragment in (acl_status(nodes["dc1"], "dc1->dc2")["last_error"] or "")

    # Without its ledger on the source, a sync cannot tell copies from originals: named.
    ledger_denied = "Read, Describe on topic replicator-checkpoints denied by the ACLs of dc1"
    wait_until(sync_error(ledger_denied), 30, "the ledger's grant named", nodes["dc1"].log)
    change_acls(dc1, add=ledger)
    wait_until(
        lambda: (
            "Alter on the cluster of dc2"
            in (acl_status(nodes["dc1"], "dc1->dc2")["last_error"] or "")
        ),
        30,
        "the refused grant named",
        nodes["dc1"].log,
    )
    sent = produce(dc1, "stock_REPLICA", 30, partitions=2)
    wait_until(holds(dc2, "stock", 30), 60, "records go on", nodes["dc1"].log)
    assert nodes["dc1"].get("/readyz")[0] == 200
    assert acl_status(nodes["dc2"], "dc2->dc1")["last_error"] is None
    wait_until(acls_are(dc1, "movable", app | {bi}), 30, "dc2's binding in dc1", nodes["dc2"].log)
    assert nodes["dc1"].metric("replicator_acl_sync_failures_total") >= 1
    change_acls(dc2, add=[alter])
    wait_until(acls_are(dc2, "movable", app | {bi}), 60, "dc1's bindings in dc2", nodes["dc1"].log)
    assert acl_status(nodes["dc1"], "dc1->dc2")["last_error"] is None
    # removed in dc1: removed in dc2 too, and never brought back from dc2's copy
    read_grant = on("stock", "app", "Read", host="10.0.0.9")
    change_acls(dc1, remove=[read_grant])
    wait_until(
        acls_are(dc2, "movable", (app - {read_grant}) | {bi}),
        30,
        "removed in dc2",
        nodes["dc1"].log,
    )
    rounds = acl_status(nodes["dc2"], "dc2->dc1")["rounds"]
    wait_until(
        lambda: acl_status(nodes["dc2"], "dc2->dc1")["rounds"] >= rounds + 3,
        30,
        "three more rounds of the sync facing it",
        nodes["dc2"].log,
    )
    assert topic_acls(dc1, "movable") == topic_acls(dc2, "movable") == (app - {read_grant}) | {bi}
    for node in nodes.values():
        assert node.stop() == 0
    for cluster in (dc1, dc2):
        report = oracle(sent, read(cluster, "stock"), "dc1")
        assert (report.delivered, report.duplicates, report.missing) == (30, 0, []), report
    change_acls(dc1, remove=grants["dc1"])
    change_acls(dc2, remove=grants["dc2"])
