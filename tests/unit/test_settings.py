"""Settings validation: every invalid configuration names its variable; secrets never leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.errors import ConfigError
from replicator.settings import SecurityProtocol, load_settings

CANARY = "canary-secret-7f3a9"

BASE = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "kafka-1.dc1:9092,kafka-2.dc1:9092",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "kafka-1.dc2:9092",
}


def config_error(env: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    return caught.value


def test_valid_configuration_is_parsed_with_defaults() -> None:
    settings = load_settings({**BASE, "REPLICATOR_CLUSTERS__DC3__BOOTSTRAP_SERVERS": "k.dc3:9093"})
    assert settings.local_cluster == "dc1"
    assert sorted(settings.clusters) == ["dc1", "dc2", "dc3"]
    assert settings.remote_clusters == ["dc2", "dc3"]
    assert settings.clusters["dc1"].servers == ["kafka-1.dc1:9092", "kafka-2.dc1:9092"]
    assert settings.replica_suffix == "_REPLICA"
    assert settings.http_port == 8080
    assert settings.clusters["dc2"].security_protocol is SecurityProtocol.PLAINTEXT


def test_local_alias_is_case_insensitive() -> None:
    assert load_settings({**BASE, "REPLICATOR_LOCAL_CLUSTER": "DC1"}).local_cluster == "dc1"


def test_settings_are_frozen() -> None:
    settings = load_settings(BASE)
    with pytest.raises(Exception, match="frozen"):
        settings.http_port = 1


def test_missing_local_cluster_names_the_variable() -> None:
    env = {k: v for k, v in BASE.items() if k != "REPLICATOR_LOCAL_CLUSTER"}
    assert config_error(env).variable == "REPLICATOR_LOCAL_CLUSTER"


def test_unknown_local_alias_names_the_variable() -> None:
    error = config_error({**BASE, "REPLICATOR_LOCAL_CLUSTER": "dc9"})
    assert error.variable == "REPLICATOR_LOCAL_CLUSTER"
    assert "dc9" in error.message and "dc1, dc2" in error.message


def test_no_cluster_at_all_is_rejected() -> None:
    error = config_error({"REPLICATOR_LOCAL_CLUSTER": "dc1"})
    assert "BOOTSTRAP_SERVERS" in error.variable


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REPLICATOR_TOPICS_INCLUDE", "orders(["),
        ("REPLICATOR_TOPICS_EXCLUDE", "*bad"),
        ("REPLICATOR_REPLICA_SUFFIX", ""),
        ("REPLICATOR_REPLICA_SUFFIX", " _R "),
        ("REPLICATOR_HTTP_PORT", "70000"),
        ("REPLICATOR_HTTP_PORT", "eighty"),
        ("REPLICATOR_LOG_LEVEL", "LOUD"),
        ("REPLICATOR_LOG_FORMAT", "xml"),
        ("REPLICATOR_COMPRESSION", "brotli"),
        ("REPLICATOR_BATCH_MAX_BYTES", "10"),
        ("REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS", "no-port-here"),
        ("REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS", ""),
        ("REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL", "TLS1"),
        ("REPLICATOR_CLUSTERS__DC2__SSL_CAFILE", "/nonexistent/ca.pem"),
        ("REPLICATOR_TOPIC_INCLUDE", ".*"),  # typo of TOPICS_INCLUDE
        ("REPLICATOR_CLUSTERS__DC2__PASSWORD", "x"),  # typo of SASL_PASSWORD
    ],
)
def test_invalid_value_names_its_variable(variable: str, value: str) -> None:
    assert config_error({**BASE, variable: value}).variable == variable


def test_invalid_cluster_alias_is_rejected() -> None:
    error = config_error({**BASE, "REPLICATOR_CLUSTERS__DC_2__BOOTSTRAP_SERVERS": "k:9092"})
    assert error.variable.startswith("REPLICATOR_CLUSTERS")


def test_sasl_requires_credentials_and_names_the_missing_one() -> None:
    env = {
        **BASE,
        "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SASL_SSL",
        "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM": "SCRAM-SHA-512",
        "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME": "replicator-dc1",
    }
    assert config_error(env).variable == "REPLICATOR_CLUSTERS__DC2__SASL_PASSWORD"


def test_separate_credentials_per_cluster_and_secret_is_masked(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not parsed at load time")
    env = {
        **BASE,
        "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SASL_SSL",
        "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM": "SCRAM-SHA-256",
        "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME": "replicator-dc1",
        "REPLICATOR_CLUSTERS__DC2__SASL_PASSWORD": CANARY,
        "REPLICATOR_CLUSTERS__DC2__SSL_CAFILE": str(ca),
    }
    settings = load_settings(env)
    dc2 = settings.clusters["dc2"]
    assert dc2.sasl_password is not None and dc2.sasl_password.get_secret_value() == CANARY
    assert settings.clusters["dc1"].sasl_password is None
    assert CANARY not in repr(settings)
    assert CANARY not in str(settings.masked())


def test_secret_never_appears_in_a_config_error() -> None:
    env = {
        **BASE,
        "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM": "GSSAPI",
        "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME": "u",
        "REPLICATOR_CLUSTERS__DC2__SASL_PASSWORD": CANARY,
    }
    error = config_error(env)
    assert error.variable == "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM"
    assert CANARY not in str(error)


def test_certificate_and_key_come_together(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    env = {
        **BASE,
        "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SSL",
        "REPLICATOR_CLUSTERS__DC2__SSL_CERTFILE": str(cert),
    }
    assert config_error(env).variable == "REPLICATOR_CLUSTERS__DC2__SSL_KEYFILE"


def test_environment_outside_the_prefix_is_ignored() -> None:
    assert load_settings({**BASE, "PATH": "/bin", "KAFKA_HEAP_OPTS": "-Xmx1g"}).local_cluster


FLOW = "REPLICATOR_FLOWS__BACKUP__"


@pytest.mark.parametrize(
    ("extra", "variable", "words"),
    [
        ({FLOW + "SOURCE": "dc1", FLOW + "TARGET": "dc9"}, FLOW + "TARGET", "no cluster"),
        ({FLOW + "SOURCE": "dc9", FLOW + "TARGET": "dc1"}, FLOW + "SOURCE", "no cluster"),
        ({FLOW + "SOURCE": "dc1", FLOW + "TARGET": "dc1"}, FLOW + "TARGET", "onto itself"),
        (
            {FLOW + "SOURCE": "dc1", FLOW + "TARGET": "dc2", FLOW + "NAMING": "prefix"},
            FLOW + "PREFIX",
            "required",
        ),
        (
            {FLOW + "SOURCE": "dc1", FLOW + "TARGET": "dc2", FLOW + "NAMNG": "prefix"},
            FLOW + "NAMNG",
            "unknown setting",
        ),
        (
            {FLOW + "SOURCE": "dc1", FLOW + "TARGET": "dc2", FLOW + "NAMING": "mirror"},
            FLOW + "NAMING",
            "identity",
        ),
        ({"REPLICATOR_REPLICA_MODE": "false"}, "REPLICATOR_REPLICA_MODE", "no flow"),
    ],
)
def test_invalid_flows_name_their_variable(
    extra: dict[str, str], variable: str, words: str
) -> None:
    error = config_error({**BASE, **extra})
    assert error.variable == variable
    assert words in error.message


def test_a_flow_may_rename_within_one_cluster() -> None:
    settings = load_settings(
        {
            **BASE,
            FLOW + "SOURCE": "dc1",
            FLOW + "TARGET": "dc1",
            FLOW + "NAMING": "prefix",
            FLOW + "PREFIX": "copy_",
        }
    )
    assert settings.flows["backup"].prefix == "copy_"
