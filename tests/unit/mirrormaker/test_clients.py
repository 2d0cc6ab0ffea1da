"""Kafka client properties: connection, SASL, TLS, consumer and producer settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.mirrormaker import mirror_maker_translation
from tests.unit.mirrormaker import test_support as support
from tests.unit.mirrormaker.test_support import (
    BASE,
    PLAIN_JAAS,
    SCRAM_JAAS,
    SECRET,
    C,
    F,
    T,
    notes_by_key,
    refusal,
    translate,
    write,
)


@pytest.fixture
def plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return support.plain_configs(tmp_path, monkeypatch)


def test_sasl_plain_and_scram_credentials(plain: Path) -> None:
    translation = translate(
        plain,
        consumer=f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n{PLAIN_JAAS}",
        producer=f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n{SCRAM_JAAS}",
    )
    env = translation.env
    assert env[C + "SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env[T + "SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"  # SCRAM never sends the password
    assert (env[C + "SASL_MECHANISM"], env[C + "SASL_USERNAME"]) == ("PLAIN", "alice")
    assert (env[T + "SASL_MECHANISM"], env[T + "SASL_USERNAME"]) == ("SCRAM-SHA-512", "bob")
    assert env[C + "SASL_PASSWORD"] == env[T + "SASL_PASSWORD"] == SECRET
    shown = translation.shown_env()
    assert shown[C + "SASL_PASSWORD"] == "<secret: from src.properties>"
    assert shown[T + "SASL_PASSWORD"] == "<secret: from dst.properties>"
    assert SECRET not in repr(shown) and SECRET not in "\n".join(translation.notes)
    settings = translation.settings()
    assert settings.clusters["t1"].sasl_password is not None
    assert settings.clusters["t1"].sasl_password.get_secret_value() == SECRET


def test_librdkafka_style_credentials_and_an_inferred_plain_mechanism(plain: Path) -> None:
    translation = translate(
        plain,
        consumer=f"security.protocol=SASL_SSL\nsasl.mechanisms=SCRAM-SHA-256\n"
        f"sasl.username=carol\nsasl.password={SECRET}\n",
        producer=f"security.protocol=SASL_SSL\n{PLAIN_JAAS}",
    )
    env = translation.env
    assert (env[C + "SASL_MECHANISM"], env[C + "SASL_USERNAME"]) == ("SCRAM-SHA-256", "carol")
    assert env[T + "SASL_MECHANISM"] == "PLAIN"
    assert any(
        n.startswith("sasl.mechanism (in dst.properties): absent") for n in translation.notes
    )
    assert SECRET not in "\n".join(translation.notes)
    translation.settings()


@pytest.mark.parametrize(
    ("consumer", "origin"),
    [
        (f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n{PLAIN_JAAS}", "sasl.mechanism"),
        (f"security.protocol=sasl_plaintext\nsasl.mechanism=plain\n{PLAIN_JAAS}", "sasl.mechanism"),
        # No sasl.mechanism: the PlainLoginModule says PLAIN, so sasl.jaas.config is named.
        (f"security.protocol=SASL_PLAINTEXT\n{PLAIN_JAAS}", "sasl.jaas.config"),
        (
            f"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\nsasl.username=carol\n"
            f"sasl.password={SECRET}\n",
            "sasl.mechanisms",
        ),
    ],
)
def test_plain_without_tls_is_refused_naming_the_property_unless_opted_in(
    plain: Path, consumer: str, origin: str
) -> None:
    translation = translate(plain, consumer)
    error = refusal(translation.settings)
    assert error.variable == f"{origin} (in src.properties)"
    assert "SASL_PLAINTEXT" in error.message and "unencrypted" in error.message
    assert C + "ALLOW_INSECURE_PLAIN=true" in error.message
    assert SECRET not in str(error)
    # The opt-in no MirrorMaker property can say comes from the operator's environment.
    opted = translation.with_environment({C + "ALLOW_INSECURE_PLAIN": "true"})
    cluster = opted.settings().clusters["s1"]
    assert cluster.allow_insecure_plain and cluster.sends_password_in_clear
    assert not any("ALLOW_INSECURE_PLAIN" in note for note in opted.notes)


def test_the_plain_opt_in_of_a_cluster_the_translation_lacks_is_ignored(plain: Path) -> None:
    translation = translate(plain).with_environment(
        {"REPLICATOR_CLUSTERS__ELSEWHERE__ALLOW_INSECURE_PLAIN": "true"}
    )
    assert "REPLICATOR_CLUSTERS__ELSEWHERE__ALLOW_INSECURE_PLAIN" not in translation.env
    assert any("ELSEWHERE__ALLOW_INSECURE_PLAIN" in note for note in translation.notes)
    translation.settings()


@pytest.mark.parametrize(
    "servers",
    [
        f"alice:{SECRET}@s1:9092",
        f"SASL_PLAINTEXT://alice:{SECRET}@s1:9092",
        f"s0:9092,alice:{SECRET}@s1:9092",
        f"{SECRET}@s1:9092",
        f"s1:9092;password={SECRET}",
    ],
)
def test_credentials_in_bootstrap_servers_are_refused_and_never_shown(
    plain: Path, servers: str
) -> None:
    write(plain, "src.properties", f"bootstrap.servers={servers}\n")
    write(plain, "dst.properties", "bootstrap.servers=t1:9092\n")
    error = refusal(mirror_maker_translation, [*BASE, "--whitelist", ".*"])
    assert error.variable == "bootstrap.servers (in src.properties)"
    assert "not host:port" in error.message
    assert SECRET not in str(error)


@pytest.mark.parametrize(
    ("consumer", "variable", "words"),
    [
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism", "GSSAPI"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n", "sasl.mechanism", "OAUTH"),
        ("security.protocol=SASL_SSL\n" + SCRAM_JAAS, "sasl.mechanism", "GSSAPI"),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\nsasl.jaas.config="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n",
            "sasl.jaas.config",
            "OAuthBearerLoginModule",
        ),
        ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n", "sasl.jaas.config", "username"),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            f"sasl.jaas.config=garbage {SECRET}\n",
            "sasl.jaas.config",
            "cannot be read",
        ),
        ("security.protocol=TLS\n", "security.protocol", "SASL_SSL"),
        (
            "security.protocol=SSL\nssl.truststore.location=ts.jks\n",
            "ssl.truststore.location",
            "convert it to PEM",
        ),
        (
            "security.protocol=SSL\nssl.keystore.location=k.p12\nssl.keystore.type=PKCS12\n",
            "ssl.keystore.location",
            "PKCS12 keystore",
        ),
        ("security.protocol=SSL\nssl.key.password=x\n", "ssl.key.password", "encrypted"),
        (
            "security.protocol=SSL\nssl.key.location=k.pem\n",
            "ssl.key.location",
            "ssl.certificate.location",
        ),
        (
            "security.protocol=SSL\nssl.truststore.certificates=-----BEGIN\n",
            "ssl.truststore.certificates",
            "inline",
        ),
        ("auto.offset.reset=none\n", "auto.offset.reset", "earliest or latest"),
        ("auto.offset.reset=sometimes\n", "auto.offset.reset", "earliest"),
        ("zookeeper.connect=zk:2181\n", "zookeeper.connect", "bootstrap.servers"),
        ("zookeeper.session.timeout.ms=400\n", "zookeeper.session.timeout.ms", "ZooKeeper"),
    ],
)
def test_consumer_property_refusals_name_the_property_and_file(
    plain: Path, consumer: str, variable: str, words: str
) -> None:
    error = refusal(translate, plain, consumer)
    assert error.variable == f"{variable} (in src.properties)"
    assert words in error.message
    assert SECRET not in error.message


@pytest.mark.parametrize(
    ("producer", "variable", "words"),
    [
        ("compression.type=producer\n", "compression.type", "none, gzip"),
        ("enable.idempotence=perhaps\n", "enable.idempotence", "true or false"),
        ("batch.size=big\n", "batch.size", "whole number"),
        ("zk.connect=tzk0:2181\n", "zk.connect", "bootstrap.servers"),
    ],
)
def test_producer_property_refusals(plain: Path, producer: str, variable: str, words: str) -> None:
    error = refusal(translate, plain, "", producer)
    assert error.variable == f"{variable} (in dst.properties)"
    assert words in error.message


def test_missing_bootstrap_servers(plain: Path) -> None:
    write(plain, "dst.properties", "acks=all\n")
    error = refusal(mirror_maker_translation, [*BASE, "--whitelist", ".*"])
    assert error.variable == "bootstrap.servers (in dst.properties)"
    write(plain, "dst.properties", "metadata.broker.list=old:9092\n")
    env = mirror_maker_translation([*BASE, "--whitelist", ".*"]).env
    assert env["REPLICATOR_CLUSTERS__OLD__BOOTSTRAP_SERVERS"] == "old:9092"  # named by it too


def test_pem_files(plain: Path) -> None:
    for name in ("ca.pem", "client.pem", "cert.pem", "key.pem"):
        write(plain, name, "-----BEGIN CERTIFICATE-----\n")
    translation = translate(
        plain,
        consumer="security.protocol=SSL\nssl.truststore.location=ca.pem\n"
        "ssl.truststore.type=PEM\nssl.keystore.type=PEM\nssl.keystore.location=client.pem\n"
        "ssl.endpoint.identification.algorithm=\n",
        producer="security.protocol=SSL\nssl.ca.location=ca.pem\n"
        "ssl.certificate.location=cert.pem\nssl.key.location=key.pem\n",
    )
    env = translation.env
    assert env[C + "SSL_CAFILE"] == "ca.pem"
    assert env[C + "SSL_CERTFILE"] == env[C + "SSL_KEYFILE"] == "client.pem"
    assert (env[T + "SSL_CAFILE"], env[T + "SSL_CERTFILE"], env[T + "SSL_KEYFILE"]) == (
        "ca.pem",
        "cert.pem",
        "key.pem",
    )
    assert any("always verifies the broker's host name" in n for n in translation.notes)
    translation.settings()


def test_a_missing_pem_file_is_attributed_to_its_property(plain: Path) -> None:
    translation = translate(plain, consumer="security.protocol=SSL\nssl.ca.location=nope.pem\n")
    error = refusal(translation.settings)
    assert error.variable == "ssl.ca.location (in src.properties)"
    assert "REPLICATOR_CLUSTERS__S1__SSL_CAFILE" in error.message


def test_producer_settings(plain: Path) -> None:
    translation = translate(
        plain,
        producer="acks=all\nbatch.size=65536\nlinger.ms=20\ncompression.type=zstd\n"
        "enable.idempotence=false\nrequest.timeout.ms=40000\nretries=5\nbuffer.memory=1\n"
        "max.in.flight.requests.per.connection=1\nkey.serializer=x\nsocket.timeout.ms=3\n"
        "send.buffer.bytes=1\nreceive.buffer.bytes=1\nretry.backoff.ms=1\nfrobnicate=yes\n",
    )
    settings = translation.settings()
    assert settings.batch_max_bytes == 65536
    assert settings.linger_ms == 20
    assert settings.compression.value == "zstd"
    assert settings.idempotence is False
    assert settings.request_timeout_ms == 40000
    notes = notes_by_key(translation)
    for key in (
        "acks",
        "retries",
        "buffer.memory",
        "max.in.flight.requests.per.connection",
        "key.serializer",
        "socket.timeout.ms",
        "send.buffer.bytes",
        "receive.buffer.bytes",
        "retry.backoff.ms",
    ):
        assert key in notes, key
    assert notes["frobnicate"].endswith("ignored: frobnicate has no meaning here")


def test_consumer_settings(plain: Path) -> None:
    translation = translate(
        plain,
        consumer="auto.offset.reset=smallest\nenable.auto.commit=true\nmax.poll.records=5\n"
        "session.timeout.ms=1\nheartbeat.interval.ms=1\nfetch.min.bytes=1\n"
        "partition.assignment.strategy=x\nvalue.deserializer=x\nexclude.internal.topics=false\n"
        "batch.size=5\n",
    )
    assert translation.env[F + "START_FROM"] == "earliest"
    notes = notes_by_key(translation)
    for key in (
        "enable.auto.commit",
        "max.poll.records",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "fetch.min.bytes",
        "partition.assignment.strategy",
        "value.deserializer",
    ):
        assert key in notes, key
    assert "still never copied" in notes["exclude.internal.topics"]
    assert "producer setting" in notes["batch.size"]
    assert "REPLICATOR_BATCH_MAX_BYTES" not in translation.env


def test_load_settings_errors_are_attributed_to_the_property(plain: Path) -> None:
    error = refusal(translate(plain, producer="request.timeout.ms=10\n").settings)
    assert error.variable == "request.timeout.ms (in dst.properties)"
    assert "REPLICATOR_REQUEST_TIMEOUT_MS" in error.message
    error = refusal(
        mirror_maker_translation([*BASE, "--whitelist", "a", "--queue.size", "0"]).settings
    )
    assert error.variable == "--queue.size"


def test_the_environment_adds_operator_settings_but_not_clusters(plain: Path) -> None:
    translation = translate(plain, producer="linger.ms=20\n").with_environment(
        {
            "REPLICATOR_HTTP_PORT": "9099",
            "REPLICATOR_LINGER_MS": "1",
            "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "x:1",
            "REPLICATOR_LOCAL_CLUSTER": "dc1",
            "PATH": "/bin",
        }
    )
    settings = translation.settings()
    assert settings.http_port == 9099
    assert settings.linger_ms == 1
    assert settings.local_cluster == "t1" and "dc1" not in settings.clusters
    assert any("overrides linger.ms (in dst.properties)" in n for n in translation.notes)
    error = refusal(translation.with_environment({"REPLICATOR_HTTP_PORT": "x"}).settings)
    assert error.variable == "REPLICATOR_HTTP_PORT (in the environment)"


def test_kubernetes_service_links_are_not_carried_into_a_translation(plain: Path) -> None:
    links = {
        "REPLICATOR_PORT": "tcp://10.0.0.1:8080",
        "REPLICATOR_PORT_8080_TCP_ADDR": "10.0.0.1",
        "REPLICATOR_SERVICE_HOST": "10.0.0.1",
    }
    translation = translate(plain).with_environment({**links, "REPLICATOR_HTTP_PORT": "9099"})
    assert not set(links) & set(translation.env), "--print-env would print the kubelet's lines"
    assert translation.settings().http_port == 9099
