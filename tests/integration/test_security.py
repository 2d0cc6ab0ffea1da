"""Security on Apache Kafka, per cluster, each with its own credentials, ACLs on.

Three datacenters, each speaking another protocol to the replicator: dc1 (its own cluster)
SASL_SSL with SCRAM-SHA-256, dc2 SSL with mutual TLS (the principal is the client
certificate's subject), dc3 SASL_PLAINTEXT with SCRAM-SHA-512; the StandardAuthorizer denies
what no ACL grants. The ACLs granted are those of the least-privilege table in
``docs/operations/security.md``. The records are produced and read by the harness through each
cluster's PLAINTEXT listener (a super user), so every check is exact.

MirrorMaker 2 and MirrorMaker 1 files secure each cluster their own way (per-cluster prefixes,
client files); `replicator mm2` and `replicator mirror-maker` run them on the same listeners.

Then what goes wrong: a wrong password, an untrusted CA, a host name the certificate does not
name, a missing client certificate, a missing ACL: each a clear error naming the cluster and the
cause, the other legs unaffected, and nothing lost once fixed. The embedded broker has no TLS
and no users: these run on Apache Kafka only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from replicator.devtools.apache_kafka import (
    ApacheKafkaCluster,
    ScramUser,
    Security,
    grant,
    start_all,
)
from tests.integration.harness import (
    BACKEND,
    ReplicatorProcess,
    Start,
    create_topics,
    holds,
    kafka_cluster,
    oracle,
    produce,
    read,
    replicator_cli,
    replicator_env,
    wait_settled,
    wait_until,
)
from tests.integration.pki import Pki, write_pki

pytestmark = pytest.mark.skipif(
    BACKEND != "kafka", reason="TLS, SCRAM users and ACLs need Apache Kafka (the default backend)"
)

DC1_PASSWORD = "dc1-canary-Zx81"
DC3_PASSWORD = "dc3-canary-Qm42"
CLIENT_SUBJECT = "User:CN=replicator-client"


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, ApacheKafkaCluster], Pki]]:
    pki = write_pki(tmp_path_factory.mktemp("pki"))
    clusters = {
        "dc1": kafka_cluster(
            "dc1",
            security=Security(
                pki=pki.directory,
                users=(ScramUser("replicator-dc1", DC1_PASSWORD, ("SCRAM-SHA-256",)),),
                acls=True,
            ),
        ),
        "dc2": kafka_cluster(
            "dc2", security=Security(pki=pki.directory, mutual_tls=True, acls=True)
        ),
        "dc3": kafka_cluster(
            "dc3",
            security=Security(
                users=(ScramUser("replicator-from-dc1", DC3_PASSWORD, ("SCRAM-SHA-512",)),),
                sasl_plaintext=True,
                acls=True,
            ),
        ),
    }
    try:
        start_all(list(clusters.values()))
        yield clusters, pki
    finally:
        for cluster in clusters.values():
            cluster.remove()


def secure_env(
    clusters: dict[str, ApacheKafkaCluster], pki: Pki, **overrides: str
) -> dict[str, str]:
    """The replicator beside dc1, each cluster on its secured listener with its credentials."""
    env = replicator_env(
        "dc1",
        {},
        clusters__dc1__bootstrap_servers=clusters["dc1"].listener("SASL_SSL"),
        clusters__dc1__security_protocol="SASL_SSL",
        clusters__dc1__sasl_mechanism="SCRAM-SHA-256",
        clusters__dc1__sasl_username="replicator-dc1",
        clusters__dc1__sasl_password=DC1_PASSWORD,
        clusters__dc1__ssl_cafile=str(pki.ca),
        clusters__dc2__bootstrap_servers=clusters["dc2"].listener("SSL"),
        clusters__dc2__security_protocol="SSL",
        clusters__dc2__ssl_cafile=str(pki.ca),
        clusters__dc2__ssl_certfile=str(pki.client_cert),
        clusters__dc2__ssl_keyfile=str(pki.client_key),
        clusters__dc3__bootstrap_servers=clusters["dc3"].listener("SASL_PLAINTEXT"),
        clusters__dc3__security_protocol="SASL_PLAINTEXT",
        clusters__dc3__sasl_mechanism="SCRAM-SHA-512",
        clusters__dc3__sasl_username="replicator-from-dc1",
        clusters__dc3__sasl_password=DC3_PASSWORD,
    )
    env.update({f"REPLICATOR_{k.upper()}": v for k, v in overrides.items()})
    return env


def grant_least_privilege(
    clusters: dict[str, ApacheKafkaCluster], topic: str, *, write_on_dc2: bool
) -> None:
    """The least-privilege table of docs/operations/security.md, for one topic."""
    local = "User:replicator-dc1"
    grant(
        clusters["dc1"],
        local,
        "--topic",
        f"{topic}_REPLICA",
        operations="Read,Describe,DescribeConfigs",
    )
    grant(
        clusters["dc1"],
        local,
        "--topic",
        topic,
        operations="Write,Read,Describe,DescribeConfigs,Create",
    )
    grant(
        clusters["dc1"],
        local,
        "--group",
        "replicator.",
        "--resource-pattern-type",
        "prefixed",
        operations="Read,Describe",
    )
    remote = {"dc2": CLIENT_SUBJECT, "dc3": "User:replicator-from-dc1"}
    for alias, principal in remote.items():
        operations = "Read,Describe,DescribeConfigs,Create"
        if alias != "dc2" or write_on_dc2:
            operations += ",Write"
        grant(clusters[alias], principal, "--topic", topic, operations=operations)
        grant(
            clusters[alias],
            principal,
            "--group",
            "replicator.",
            "--resource-pattern-type",
            "prefixed",
            operations="Read,Describe",
        )


def test_each_cluster_its_own_protocol_and_credentials_with_acls_and_a_missing_grant(
    replicators: Start, secured: tuple[dict[str, ApacheKafkaCluster], Pki]
) -> None:
    """Every record reaches all three clusters exactly, in order; while dc2 lacks the Write ACL
    only dc2's leg waits, reported as denied by the ACLs on dc2, and once the grant is added
    dc2 receives everything, exactly. No secret appears in the log, /status or /metrics."""
    clusters, pki = secured
    topic = "payments"
    create_topics(clusters["dc1"], None, payments_REPLICA=2)
    grant_least_privilege(clusters, topic, write_on_dc2=False)
    dc1 = replicators("dc1", secure_env(clusters, pki))
    dc1.wait_serving()
    source = produce(clusters["dc1"], f"{topic}_REPLICA", 200, partitions=2)
    for alias in ("dc1", "dc3"):
        wait_until(holds(clusters[alias], topic, 200), 90, f"{alias} delivered", dc1.log)

    def dc2_denied() -> bool:
        status, body = dc1.get("/readyz")
        problems = [p for p in body.get("problems", []) if "dc2" in p]
        return status == 503 and any("ACL" in p for p in problems)

    wait_until(dc2_denied, 60, "/readyz naming dc2's missing ACL", dc1.log)
    _, ready = dc1.get("/readyz")
    assert not [p for p in ready["problems"] if "dc3" in p or "dc1->dc1" in p], ready
    assert read(clusters["dc2"], topic) == []

    grant(clusters["dc2"], CLIENT_SUBJECT, "--topic", topic, operations="Write")
    wait_until(holds(clusters["dc2"], topic, 200), 90, "dc2 after the grant", dc1.log)
    dc1.wait_ready(timeout=60)
    wait_settled(dc1)
    for alias, cluster in clusters.items():
        report = oracle(source, read(cluster, topic), "dc1")
        assert not report.missing and not report.duplicates, f"{alias}: {report}"
        assert not report.out_of_order, f"{alias}: {report}"
        assert report.delivered == 200, f"{alias}: {report}"
    surfaces = {
        "/status": str(dc1.get("/status")[1]),
        "/metrics": dc1.get("/metrics")[1],
        "/readyz": str(dc1.get("/readyz")[1]),
    }
    assert dc1.stop() == 0
    surfaces["log"] = dc1.log_path.read_text(errors="replace")
    for name, text in surfaces.items():
        for secret in (DC1_PASSWORD, DC3_PASSWORD):
            assert secret not in text, f"a password leaked into {name}"


@pytest.mark.parametrize(
    ("alias", "change", "cause"),
    [
        ("dc1", {"clusters__dc1__sasl_password": "wrong-password"}, "authentication refused"),
        ("dc3", {"clusters__dc3__sasl_mechanism": "SCRAM-SHA-256"}, "authentication refused"),
        ("dc2", {"clusters__dc2__ssl_cafile": "<untrusted>"}, "TLS handshake failed"),
        ("dc2", {"clusters__dc2__bootstrap_servers": "<localhost>"}, "TLS handshake failed"),
        (
            "dc2",
            {"clusters__dc2__ssl_certfile": "", "clusters__dc2__ssl_keyfile": ""},
            "TLS without a client certificate",
        ),
    ],
    ids=[
        "wrong-password",
        "wrong-mechanism",
        "untrusted-ca",
        "hostname-mismatch",
        "no-client-cert",
    ],
)
def test_a_refused_connection_names_the_cluster_and_the_cause(
    secured: tuple[dict[str, ApacheKafkaCluster], Pki],
    alias: str,
    change: dict[str, str],
    cause: str,
) -> None:
    """``replicator check-config`` exits 2 naming the one cluster refused and why; the others
    are reachable; no password is printed."""
    clusters, pki = secured
    overrides = dict(change)
    for key, value in overrides.items():
        if value == "<untrusted>":
            overrides[key] = str(pki.untrusted_ca)
        if value == "<localhost>":
            port = clusters["dc2"].listener("SSL").rsplit(":", 1)[1]
            overrides[key] = f"localhost:{port}"
    env = secure_env(clusters, pki, **overrides)
    for key in [k for k, v in overrides.items() if v == ""]:
        del env[f"REPLICATOR_{key.upper()}"]
    status, out, err = replicator_cli(env, "check-config")
    assert status == 2, out + err
    lines = [line for line in out.splitlines() if line.startswith("cluster ")]
    refused = [line for line in lines if "UNREACHABLE" in line]
    assert len(refused) == 1 and refused[0].startswith(f"cluster {alias}: UNREACHABLE"), out
    assert cause in refused[0], refused[0]
    assert len(lines) == 3 and sum(line.endswith(": reachable") for line in lines) == 2, out
    for secret in (DC1_PASSWORD, DC3_PASSWORD, "wrong-password"):
        assert secret not in out + err
    assert Path(pki.ca).exists()


def copies_exactly_and_shows_no_secret(
    node: ReplicatorProcess,
    source: ApacheKafkaCluster,
    topic: str,
    target: ApacheKafkaCluster,
    copy: str,
    origin: str = "primary",
) -> None:
    """200 records produced to ``topic`` reach ``copy`` once each, in order; no password
    appears in the node's log, ``/status`` or ``/metrics``."""
    node.wait_ready(timeout=90)
    sent = produce(source, topic, 200, partitions=2)
    wait_until(holds(target, copy, 200), 90, copy, node.log)
    wait_settled(node)
    report = oracle(sent, read(target, copy), origin)
    assert (report.delivered, report.duplicates, report.missing) == (200, 0, []), report
    assert not report.out_of_order, report
    surfaces = str(node.get("/status")[1]) + node.get("/metrics")[1]
    assert node.stop() == 0
    text = surfaces + node.log_path.read_text(errors="replace")
    for secret in (DC1_PASSWORD, DC3_PASSWORD):
        assert secret not in text


def test_a_mirror_maker_2_file_with_per_cluster_security_runs_on_these_listeners(
    replicators: Start, tmp_path: Path, secured: tuple[dict[str, ApacheKafkaCluster], Pki]
) -> None:
    """MirrorMaker 2's own way of securing each cluster (``<alias>.security.protocol``,
    ``<alias>.sasl.jaas.config``, ``<alias>.ssl.truststore.*`` and a PEM keystore) given to
    ``replicator mm2``: primary is dc1 over SASL_SSL with SCRAM-SHA-256, backup is dc2 over
    mutual TLS, ACLs on. Every record reaches ``primary.mm-orders`` exactly; the password
    appears nowhere."""
    clusters, pki = secured
    primary, backup = clusters["dc1"], clusters["dc2"]
    create_topics(primary, None, **{"mm-orders": 2})
    for cluster, principal, topics in (
        (primary, "User:replicator-dc1", ("mm-", "heartbeats")),
        (backup, CLIENT_SUBJECT, ("primary.", "heartbeats")),
    ):
        for prefix in topics:
            grant(cluster, principal, "--topic", prefix, "--resource-pattern-type", "prefixed",
                  operations="All")  # fmt: skip
        grant(cluster, principal, "--group", "replicator", "--resource-pattern-type", "prefixed",
              operations="All")  # fmt: skip
    keystore = tmp_path / "client-keystore.pem"  # MM2's PEM keystore: certificate and key
    keystore.write_text(pki.client_cert.read_text() + pki.client_key.read_text())
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="replicator-dc1" password="{DC1_PASSWORD}";'
    )
    config = tmp_path / "connect-mirror-maker.properties"
    config.write_text(
        "\n".join(
            [
                "clusters = primary, backup",
                f"primary.bootstrap.servers = {primary.listener('SASL_SSL')}",
                "primary.security.protocol = SASL_SSL",
                "primary.sasl.mechanism = SCRAM-SHA-256",
                f"primary.sasl.jaas.config = {jaas}",
                f"primary.ssl.truststore.location = {pki.ca}",
                "primary.ssl.truststore.type = PEM",
                f"backup.bootstrap.servers = {backup.listener('SSL')}",
                "backup.security.protocol = SSL",
                f"backup.ssl.truststore.location = {pki.ca}",
                "backup.ssl.truststore.type = PEM",
                f"backup.ssl.keystore.location = {keystore}",
                "backup.ssl.keystore.type = PEM",
                "primary->backup.enabled = true",
                "primary->backup.topics = mm-.*",
                "emit.checkpoints.enabled = false",
                "sync.topic.acls.enabled = false",
                "replication.factor = 1",
            ]
        )
        + "\n"
    )
    node = replicators("backup", {"REPLICATOR_LOG_FORMAT": "json"}, ("mm2", str(config)))
    copies_exactly_and_shows_no_secret(node, primary, "mm-orders", backup, "primary.mm-orders")


def test_mirror_maker_1_client_files_with_their_security_run_on_these_listeners(
    replicators: Start, tmp_path: Path, secured: tuple[dict[str, ApacheKafkaCluster], Pki]
) -> None:
    """MirrorMaker 1's ``--consumer.config`` (dc1 over SASL_SSL, SCRAM-SHA-256, its
    credentials as ``sasl.username``/``sasl.password``) and ``--producer.config`` (dc3 over
    SASL_PLAINTEXT, SCRAM-SHA-512 in ``sasl.jaas.config``) given to ``replicator mirror-maker``:
    every record reaches dc3's ``mm1-orders`` exactly, in order; no password appears."""
    clusters, pki = secured
    source, target = clusters["dc1"], clusters["dc3"]
    create_topics(source, None, **{"mm1-orders": 2})
    for cluster, principal in ((source, "User:replicator-dc1"),
                               (target, "User:replicator-from-dc1")):  # fmt: skip
        for kind, prefix in (("--topic", "mm1-"), ("--group", "replicator"), ("--group", "mm1-")):
            grant(cluster, principal, kind, prefix, "--resource-pattern-type", "prefixed",
                  operations="All")  # fmt: skip
    consumer = tmp_path / "consumer.config"
    consumer.write_text(
        f"bootstrap.servers={source.listener('SASL_SSL')}\n"
        "group.id=mm1-secure\nauto.offset.reset=earliest\n"
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username=replicator-dc1\nsasl.password={DC1_PASSWORD}\n"
        f"ssl.truststore.location={pki.ca}\nssl.truststore.type=PEM\n"
        "replicator.cluster.alias=dc1\n"
    )
    producer = tmp_path / "producer.config"
    producer.write_text(
        f"bootstrap.servers={target.listener('SASL_PLAINTEXT')}\n"
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="replicator-from-dc1" password="{DC3_PASSWORD}";\n'
    )
    args = ("mirror-maker", "--consumer.config", str(consumer), "--producer.config",
            str(producer), "--whitelist", "mm1-.*")  # fmt: skip
    node = replicators("dc3", {"REPLICATOR_LOG_FORMAT": "json"}, args)
    copies_exactly_and_shows_no_secret(node, source, "mm1-orders", target, "mm1-orders", "dc1")
