"""Operator commands against real brokers: check-config, lag, topics ensure and the sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from replicator.config.loading import load_settings
from replicator.devtools.apache_kafka import KAFKA_VERSION
from replicator.devtools.embedded import free_port
from replicator.kafka.readers import read_topic
from replicator.topics.provisioning import topic_configs
from tests.integration.harness import (
    Start,
    _create_topics,
    admin_client,
    create_topics,
    holds,
    produce,
    replicator_cli,
    replicator_env,
    run,
    scram_cluster,
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
    with scram_cluster("dc3") as dc3, start_clusters("dc1") as brokers:
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
    assert status == 2, out + err
    assert "cluster dc1: reachable" in out
    assert "cluster dc3: UNREACHABLE: authentication refused" in out
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


def _check(env: dict[str, str], **rules: str) -> tuple[int, dict[str, Any], str]:
    extra = {f"REPLICATOR_TOPICS_{k.upper()}": v for k, v in rules.items()}
    status, out, err = replicator_cli({**env, **extra}, "check-config", "--json")
    return status, json.loads(out), err


def test_check_config_lists_replicated_and_rejected_topics_by_reason() -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(
            brokers["dc1"],
            orders_REPLICA=1,
            payments_REPLICA=1,
            refunds_REPLICA=1,
            orders_REPLICA_REPLICA=1,
            orders=1,
        )
        env = replicator_env("dc1", brokers)

        status, report, err = _check(env, include="^orders$")
        assert status == 0, err
        topics = report["topics"]
        assert topics["replicated"] == ["orders_REPLICA"]
        assert topics["rejected"]["not_included"] == ["payments_REPLICA", "refunds_REPLICA"]
        assert topics["rejected"]["target_is_replica_topic"] == ["orders_REPLICA_REPLICA"]
        assert "orders" in topics["rejected"]["not_a_replica_topic"]

        status, report, err = _check(env, include="orders, payments", exclude="refunds")
        assert status == 0, err
        assert report["topics"]["replicated"] == ["orders_REPLICA", "payments_REPLICA"]
        assert report["topics"]["rejected"]["not_included"] == ["refunds_REPLICA"]

        status, report, err = _check(env, exclude="refunds,payments")
        assert status == 0, err
        assert report["topics"]["replicated"] == ["orders_REPLICA"]
        assert report["topics"]["rejected"]["excluded"] == ["payments_REPLICA", "refunds_REPLICA"]

        extra = {"REPLICATOR_TOPICS_INCLUDE": "^orders$"}
        status, out, err = replicator_cli({**env, **extra}, "check-config")
        assert status == 0, err
        assert "replicated: orders_REPLICA -> orders" in out
        assert "rejected (not_included): payments_REPLICA" in out
        assert "rejected (target_is_replica_topic): orders_REPLICA_REPLICA" in out
        assert "not a replica topic" in out and "warning" not in err

        status, report, err = _check(env, include="shipments")
        assert status == 0 and report["topics"]["replicated"] == []
        assert "no topic of dc1 would be replicated" in err
        assert "REPLICATOR_TOPICS_INCLUDE='shipments'" in err
        assert "orders_REPLICA (not_included)" in err


def test_check_config_names_the_address_of_an_unreachable_cluster() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with start_clusters("dc1") as brokers:
        env = replicator_env("dc1", brokers, clusters__dc2__bootstrap_servers=nobody)
        status, out, err = replicator_cli(env, "check-config")
        assert status == 2, out + err
        assert "cluster dc1: reachable" in out
        unreachable = [line for line in out.splitlines() if line.startswith("cluster dc2:")]
        assert len(unreachable) == 1 and nobody in unreachable[0], out
        status, report, _ = _check(env)
        assert status == 2 and nobody in report["clusters"]["dc2"]["error"]
        assert report["topics"] == {"replicated": [], "rejected": {}}


def test_lag_warns_and_exits_1_when_the_rules_select_no_topic() -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=1, payments_REPLICA=1)
        env = replicator_env("dc1", brokers, topics_include="shipments,returns")
        status, out, err = replicator_cli(env, "lag", "--json")
        assert status == 1, err
        assert json.loads(out) == []
        assert "REPLICATOR_TOPICS_INCLUDE='shipments|returns'" in err
        assert "orders_REPLICA (not_included)" in err and "payments_REPLICA (not_included)" in err
        status, _, err = replicator_cli(env, "lag")
        assert status == 1 and "no topic of dc1 would be replicated" in err


async def _round_trip(bootstrap: str, topic: str, value: bytes) -> list[bytes]:
    await _create_topics(bootstrap, {topic: 1}, {})  # Apache Kafka creates none by itself here
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()
    return [r.value for r in await read_topic(bootstrap, topic) if r.value is not None]


@pytest.mark.parametrize("broker", ["embedded", "kafka"])
def test_sandbox_serves_one_broker_per_alias_prints_their_env_and_stops_on_sigterm(
    broker: str,
) -> None:
    """The trial broker (no JVM), or Apache Kafka itself for a user who wants the real one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    command = ["sandbox", "--clusters", "dc1,dc2", "--json", "--broker", broker]
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "replicator", *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert sandbox.stdout is not None
        printed = json.loads(sandbox.stdout.readline())
        clusters = printed["clusters"]
        assert set(clusters) == {"dc1", "dc2"} and clusters["dc1"] != clusters["dc2"]
        envs = printed["env"]
        assert envs["dc1"]["REPLICATOR_LOCAL_CLUSTER"] == "dc1"
        assert envs["dc1"]["REPLICATOR_HTTP_PORT"] != envs["dc2"]["REPLICATOR_HTTP_PORT"]
        for alias in ("dc1", "dc2"):
            for other, bootstrap in clusters.items():
                variable = f"REPLICATOR_CLUSTERS__{other.upper()}__BOOTSTRAP_SERVERS"
                assert envs[alias][variable] == bootstrap
            assert load_settings(envs[alias]).local_cluster == alias
        for alias, bootstrap in clusters.items():
            value = f"hello {alias}".encode()
            assert run(_round_trip(bootstrap, "sandbox_check", value)) == [value]
        sandbox.send_signal(signal.SIGTERM)
        assert sandbox.wait(timeout=30) == 0
        assert sandbox.stderr is not None
        messages = sandbox.stderr.read()
        if broker == "embedded":
            assert "memory only" in messages and "not production" in messages
        else:
            assert f"Apache Kafka {KAFKA_VERSION}" in messages and "memory only" not in messages
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait()


def test_topics_ensure_warns_when_the_rules_would_not_replicate_the_pair() -> None:
    with start_clusters("dc1", "dc2") as brokers:
        env = replicator_env("dc1", brokers, topics_include="orders")
        args = ("topics", "ensure", "--topic", "payments", "--partitions", "2", "--json")
        status, out, err = replicator_cli(env, *args)
        assert status == 0, err
        assert {o["action"] for o in json.loads(out)} == {"created"}
        assert "payments_REPLICA will not be replicated" in err
        assert "not_included" in err and "REPLICATOR_TOPICS_INCLUDE='orders'" in err
        status, out, err = replicator_cli(env, *args[:-1], "--topic", "orders_REPLICA")
        assert status == 2 and "give the real topic name: orders" in err
