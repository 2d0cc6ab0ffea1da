"""Operator commands against real brokers: ``replicator check-config`` and ``replicator lag``."""

from __future__ import annotations

import json

from replicator.embedded import EmbeddedBroker
from replicator.topics import topic_configs
from tests.integration.harness import (
    Start,
    admin_client,
    create_topics,
    holds,
    produce,
    replicator_cli,
    replicator_env,
    run,
    start_clusters,
    wait_until,
)

CANARY = "canary-secret-check-config"


async def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = await admin_client(bootstrap)
    try:
        return await topic_configs(admin, topic)
    finally:
        await admin.close()


def test_check_config_prints_the_effective_configuration_and_reaches_every_cluster() -> None:
    with start_clusters("dc1", "dc2") as brokers:
        env = replicator_env("dc1", brokers)
        status, out, err = replicator_cli(env, "check-config", "--json")
        assert status == 0, err
        report = json.loads(out)
        assert report["clusters"] == {
            "dc1": {"reachable": True, "error": None},
            "dc2": {"reachable": True, "error": None},
        }
        assert report["configuration"]["local_cluster"] == "dc1"
        assert report["configuration"]["replica_suffix"] == "_REPLICA"


def test_check_config_fails_with_2_on_refused_credentials_and_masks_them() -> None:
    dc3 = EmbeddedBroker("dc3", authentication=True).start()
    try:
        with start_clusters("dc1") as brokers:
            env = replicator_env(
                "dc1",
                brokers,
                clusters__dc3__bootstrap_servers=dc3.bootstrap_servers,
                clusters__dc3__security_protocol="SASL_PLAINTEXT",
                clusters__dc3__sasl_mechanism="SCRAM-SHA-512",
                clusters__dc3__sasl_username="replicator-dc1",
                clusters__dc3__sasl_password=CANARY,
            )
            status, out, err = replicator_cli(env, "check-config")
    finally:
        dc3.stop()
    assert status == 2, out + err
    assert "cluster dc1: reachable" in out
    assert "cluster dc3: UNREACHABLE: SASL/SCRAM authentication refused" in out
    assert CANARY not in out + err and "**********" in out
    status, _, err = replicator_cli({"REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "x:1"}, "lag")
    assert status == 2 and "REPLICATOR_LOCAL_CLUSTER" in err


def test_lag_shows_committed_offsets_log_ends_and_lag_per_leg(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=2)
        env = replicator_env("dc1", brokers)
        produce(local, "orders_REPLICA", 200, partitions=2)
        dc1 = replicators("dc1", env)
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 200), 60, f"orders on {broker.alias}", dc1.log)
        assert dc1.stop() == 0
        produce(local, "orders_REPLICA", 30, partitions=2, tag="-late")
        status, out, err = replicator_cli(env, "lag", "--json")
        assert status == 0, err
        rows = {(r["leg"], r["partition"]): r for r in json.loads(out)}
        for leg in ("dc1->dc1", "dc1->dc2"):
            for partition in (0, 1):
                row = rows[(leg, partition)]
                assert (row["committed"], row["log_end"], row["lag"]) == (100, 115, 15), row
                assert row["group"] == f"replicator.{leg.replace('->', '.')}"
        status, out, _ = replicator_cli(env, "lag")
        assert status == 0 and "dc1->dc2: 30 records behind" in out


def test_topics_ensure_creates_matching_pairs_everywhere_and_reports_mismatches() -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc2"], payments=2)  # an existing X with too few partitions
        env = replicator_env("dc1", brokers)
        args = ("topics", "ensure", "--topic", "orders", "--partitions", "3")
        status, out, err = replicator_cli(env, *args, "--config", "retention.ms=86400000", "--json")
        assert status == 0, err
        outcomes = {(o["cluster"], o["topic"]): o["action"] for o in json.loads(out)}
        assert outcomes == {
            (c, t): "created" for c in ("dc1", "dc2") for t in ("orders_REPLICA", "orders")
        }
        for broker in brokers.values():
            assert run(_configs(broker.bootstrap_servers, "orders_REPLICA")) == {
                "retention.ms": "86400000"
            }
        status, out, _ = replicator_cli(env, *args, "--json")
        assert status == 0 and {o["action"] for o in json.loads(out)} == {"exists"}
        status, out, _ = replicator_cli(
            env, "topics", "ensure", "--topic", "payments", "--partitions", "3", "--json"
        )
        assert status == 1
        mismatched = [o for o in json.loads(out) if o["action"] == "mismatch"]
        assert [(o["cluster"], o["topic"], o["partitions"]) for o in mismatched] == [
            ("dc2", "payments", 2)
        ]
