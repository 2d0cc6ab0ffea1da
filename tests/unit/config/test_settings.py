"""Settings validation: every invalid configuration names its variable; secrets never leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.config.loading import load_settings
from replicator.config.values import SecurityProtocol
from replicator.errors import ConfigError

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


def scram(**extra: str) -> dict[str, str]:
    return {
        **BASE,
        "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SASL_SSL",
        "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM": "SCRAM-SHA-512",
        "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME": "replicator-dc1",
        **{f"REPLICATOR_CLUSTERS__DC2__{key.upper()}": value for key, value in extra.items()},
    }


@pytest.mark.parametrize("ending", ["", "\n", "\r\n"])
def test_the_password_comes_from_a_mounted_secret_file(tmp_path: Path, ending: str) -> None:
    secret = tmp_path / "dc2-password"
    secret.write_bytes(f"{CANARY}{ending}".encode())
    settings = load_settings(scram(sasl_password_file=str(secret)))
    dc2 = settings.clusters["dc2"]
    assert dc2.sasl_password is not None and dc2.sasl_password.get_secret_value() == CANARY
    assert CANARY not in repr(settings) and CANARY not in str(settings.masked())


def test_a_password_file_that_cannot_serve_is_refused_naming_its_variable(tmp_path: Path) -> None:
    name = "REPLICATOR_CLUSTERS__DC2__SASL_PASSWORD_FILE"
    missing = config_error(scram(sasl_password_file=str(tmp_path / "absent")))
    assert missing.variable == name and "No such file" in missing.message, missing
    (tmp_path / "empty").write_text("\n")
    empty = config_error(scram(sasl_password_file=str(tmp_path / "empty")))
    assert empty.variable == name and "empty" in empty.message, empty
    (tmp_path / "secret").write_text(CANARY)
    both = config_error(scram(sasl_password_file=str(tmp_path / "secret"), sasl_password="x"))
    assert both.variable == name and "SASL_PASSWORD is set as well" in both.message, both
    unset = config_error(scram(sasl_password_file=""))
    assert unset.variable == name and "give the path" in unset.message, unset
    for error in (missing, empty, both):
        assert CANARY not in str(error)


def test_a_password_file_is_named_as_given_by_the_sasl_protocol_checks(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text(CANARY)
    plain = {**BASE, DC2 + "SASL_PASSWORD_FILE": str(tmp_path / "secret")}
    error = config_error(plain)
    assert error.variable == DC2 + "SASL_PASSWORD_FILE", error
    assert f"remove {DC2}SASL_PASSWORD_FILE" in error.message and CANARY not in str(error)
    missing = config_error(scram())
    assert missing.variable == DC2 + "SASL_PASSWORD"
    assert f"(or {DC2}SASL_PASSWORD_FILE)" in missing.message


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


# -- the replicator's own topics are never application topics ------------------------------------

BACKUP = {FLOW + "SOURCE": "dc1", FLOW + "TARGET": "dc2"}
FLOWS_ONLY = {"REPLICATOR_REPLICA_MODE": "false", **BACKUP}


@pytest.mark.parametrize(
    ("extra", "variable", "words"),
    [
        # The _REPLICA mode replicates orders_REPLICA into orders.
        ({"REPLICATOR_HEARTBEAT_TOPIC": "orders"}, "REPLICATOR_HEARTBEAT_TOPIC", "orders_REPLICA"),
        ({"REPLICATOR_CHECKPOINTS_TOPIC": "orders"}, "REPLICATOR_CHECKPOINTS_TOPIC", "orders"),
        ({"REPLICATOR_DEAD_LETTER_TOPIC": "orders"}, "REPLICATOR_DEAD_LETTER_TOPIC", "orders"),
        (
            {"REPLICATOR_HEARTBEAT_TOPIC": "orders", "REPLICATOR_TOPICS_INCLUDE": "orders, pay.*"},
            "REPLICATOR_HEARTBEAT_TOPIC",
            "REPLICATOR_TOPICS_EXCLUDE",
        ),
        # A replica topic: applications write it, the replicator reads it.
        ({"REPLICATOR_HEARTBEAT_TOPIC": "orders_REPLICA"}, "REPLICATOR_HEARTBEAT_TOPIC", "suffix"),
        ({"REPLICATOR_CHECKPOINTS_TOPIC": "cp_REPLICA"}, "REPLICATOR_CHECKPOINTS_TOPIC", "suffix"),
        ({"REPLICATOR_DEAD_LETTER_TOPIC": "dl_REPLICA"}, "REPLICATOR_DEAD_LETTER_TOPIC", "suffix"),
        (
            {"REPLICATOR_REPLICA_SUFFIX": "-in", "REPLICATOR_HEARTBEAT_TOPIC": "orders-in"},
            "REPLICATOR_HEARTBEAT_TOPIC",
            "suffix",
        ),
        # A flow's source topic, or the name a flow gives one on its target.
        (
            {**FLOWS_ONLY, "REPLICATOR_HEARTBEAT_TOPIC": "orders"},
            "REPLICATOR_HEARTBEAT_TOPIC",
            "flow backup",
        ),
        (
            {
                **FLOWS_ONLY,
                FLOW + "TOPICS_INCLUDE": "orders",
                "REPLICATOR_CHECKPOINTS_TOPIC": "orders",
            },
            "REPLICATOR_CHECKPOINTS_TOPIC",
            "flow backup replicates it",
        ),
        (
            {
                **FLOWS_ONLY,
                FLOW + "NAMING": "source-alias",
                FLOW + "TOPICS_INCLUDE": "orders",
                "REPLICATOR_HEARTBEAT_TOPIC": "dc1.orders",
            },
            "REPLICATOR_HEARTBEAT_TOPIC",
            "replicates orders into it",
        ),
        (
            {
                **FLOWS_ONLY,
                FLOW + "NAMING": "prefix",
                FLOW + "PREFIX": "dc1_",
                FLOW + "TOPICS_INCLUDE": "orders",
                "REPLICATOR_DEAD_LETTER_TOPIC": "dc1_orders",
            },
            "REPLICATOR_DEAD_LETTER_TOPIC",
            "replicates orders into it",
        ),
        # Both modes at once: the flow's topics count too.
        (
            {
                **BACKUP,
                "REPLICATOR_TOPICS_INCLUDE": "payments",
                "REPLICATOR_HEARTBEAT_TOPIC": "orders",
            },
            "REPLICATOR_HEARTBEAT_TOPIC",
            "flow backup",
        ),
        # Two of the replicator's topics in one: the one moved from its default is named.
        (
            {"REPLICATOR_HEARTBEAT_TOPIC": "replicator-checkpoints"},
            "REPLICATOR_HEARTBEAT_TOPIC",
            "REPLICATOR_CHECKPOINTS_TOPIC",
        ),
        (
            {"REPLICATOR_HEARTBEAT_TOPIC": "__own", "REPLICATOR_DEAD_LETTER_TOPIC": "__own"},
            "REPLICATOR_DEAD_LETTER_TOPIC",
            "REPLICATOR_HEARTBEAT_TOPIC",
        ),
        # Not a topic name at all.
        ({"REPLICATOR_HEARTBEAT_TOPIC": "orders/eu"}, "REPLICATOR_HEARTBEAT_TOPIC", "topic name"),
        ({"REPLICATOR_CHECKPOINTS_TOPIC": ""}, "REPLICATOR_CHECKPOINTS_TOPIC", "topic name"),
        ({"REPLICATOR_DEAD_LETTER_TOPIC": " "}, "REPLICATOR_DEAD_LETTER_TOPIC", "topic name"),
    ],
)
def test_an_own_topic_that_is_an_application_topic_is_refused(
    extra: dict[str, str], variable: str, words: str
) -> None:
    error = config_error({**BASE, **extra})
    assert error.variable == variable
    assert words in error.message


@pytest.mark.parametrize(
    "extra",
    [
        {},  # the defaults are reserved: the rules never replicate into them
        {**FLOWS_ONLY},
        {"REPLICATOR_HEARTBEAT_TOPIC": "__heartbeats"},  # excluded by default
        {"REPLICATOR_HEARTBEAT_TOPIC": "orders", "REPLICATOR_TOPICS_INCLUDE": "payments"},
        {"REPLICATOR_HEARTBEAT_TOPIC": "beats", "REPLICATOR_TOPICS_EXCLUDE": "beats|__.*"},
        {**FLOWS_ONLY, FLOW + "TOPICS_INCLUDE": "orders", "REPLICATOR_HEARTBEAT_TOPIC": "beats"},
        {
            **FLOWS_ONLY,
            FLOW + "NAMING": "source-alias",
            "REPLICATOR_CHECKPOINTS_TOPIC": "mm2.checkpoints.internal",
            FLOW + "TOPICS_EXCLUDE": r".*[\-\.]internal",
        },
    ],
)
def test_own_topics_the_rules_do_not_replicate_are_accepted(extra: dict[str, str]) -> None:
    load_settings({**BASE, **extra})


def test_the_refusal_of_an_application_topic_says_what_to_do() -> None:
    error = config_error({**BASE, "REPLICATOR_HEARTBEAT_TOPIC": "orders"})
    assert "'heartbeats', reserved" in error.message and "'__orders'" in error.message
    load_settings({**BASE, "REPLICATOR_HEARTBEAT_TOPIC": "__orders"})  # the advice holds


# -- SASL PLAIN needs TLS ------------------------------------------------------------------------

DC2 = "REPLICATOR_CLUSTERS__DC2__"


def sasl(protocol: str, mechanism: str, **extra: str) -> dict[str, str]:
    return {
        **BASE,
        DC2 + "SECURITY_PROTOCOL": protocol,
        DC2 + "SASL_MECHANISM": mechanism,
        DC2 + "SASL_USERNAME": "replicator-dc1",
        DC2 + "SASL_PASSWORD": CANARY,
        **{DC2 + key.upper(): value for key, value in extra.items()},
    }


def test_plain_without_tls_is_refused_naming_the_variable_and_the_opt_in() -> None:
    error = config_error(sasl("SASL_PLAINTEXT", "PLAIN"))
    assert error.variable == DC2 + "SASL_MECHANISM"
    assert "SASL_PLAINTEXT" in error.message and "unencrypted" in error.message
    assert DC2 + "ALLOW_INSECURE_PLAIN=true" in error.message
    assert CANARY not in str(error)


@pytest.mark.parametrize("allow", ["false", "0", "no"])
def test_plain_without_tls_is_refused_unless_explicitly_accepted(allow: str) -> None:
    error = config_error(sasl("SASL_PLAINTEXT", "PLAIN", allow_insecure_plain=allow))
    assert error.variable == DC2 + "SASL_MECHANISM"


def test_plain_without_tls_is_accepted_with_the_opt_in_for_that_cluster_only() -> None:
    settings = load_settings(sasl("SASL_PLAINTEXT", "PLAIN", allow_insecure_plain="true"))
    dc2 = settings.clusters["dc2"]
    assert dc2.allow_insecure_plain and dc2.sends_password_in_clear
    assert not settings.clusters["dc1"].allow_insecure_plain
    env = {
        **sasl("SASL_PLAINTEXT", "PLAIN", allow_insecure_plain="true"),
        "REPLICATOR_CLUSTERS__DC1__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "REPLICATOR_CLUSTERS__DC1__SASL_MECHANISM": "PLAIN",
        "REPLICATOR_CLUSTERS__DC1__SASL_USERNAME": "u",
        "REPLICATOR_CLUSTERS__DC1__SASL_PASSWORD": "p",
    }
    assert config_error(env).variable == "REPLICATOR_CLUSTERS__DC1__SASL_MECHANISM"


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ("SASL_SSL", "PLAIN"),
    ],
)
def test_scram_without_tls_and_plain_over_tls_stay_allowed(protocol: str, mechanism: str) -> None:
    dc2 = load_settings(sasl(protocol, mechanism)).clusters["dc2"]
    assert not dc2.sends_password_in_clear


# -- credentials typed into a value never appear in a message ------------------------------------

CREDENTIAL_SHAPES = [
    f"user:{CANARY}@kafka-1.dc2:9092",
    f"sasl://user:{CANARY}@kafka-1.dc2",
    f"SASL_SSL://user:{CANARY}@kafka-1.dc2:9093",
    f"{CANARY}@kafka-1.dc2:9092",  # a token as the user part
    f"kafka-0.dc2:9092,user:{CANARY}@kafka-1.dc2:9092",
    f"user:{CANARY}@kafka-1.dc2:9092,kafka-2.dc2:9092",
    f"user:pa,{CANARY}@kafka-1.dc2:9092",  # a comma in the password
    f"user:{CANARY},x@kafka-1.dc2:9092",
    f"user:p@{CANARY}@kafka-1.dc2:9092",  # an '@' in the password
    f"kafka-1.dc2:9092;password={CANARY}",
    f"kafka-1.dc2:9092?password={CANARY},more",
    f"kafka-1.dc2:9092 sasl.password={CANARY}",
]


@pytest.mark.parametrize("servers", CREDENTIAL_SHAPES)
def test_credentials_in_a_bootstrap_entry_are_refused_and_never_shown(servers: str) -> None:
    error = config_error({**BASE, DC2 + "BOOTSTRAP_SERVERS": servers})
    assert error.variable == DC2 + "BOOTSTRAP_SERVERS"
    assert "host:port" in error.message
    assert CANARY not in str(error)
    assert CANARY[:6] not in str(error)  # nor a part of it


def test_credentials_in_an_address_say_where_they_belong_and_show_the_host() -> None:
    error = config_error({**BASE, DC2 + "BOOTSTRAP_SERVERS": f"user:{CANARY}@kafka-1.dc2:9092"})
    assert "***@kafka-1.dc2:9092" in error.message
    assert "SASL_USERNAME" in error.message and "SASL_PASSWORD" in error.message
    assert error.message.count("kafka-1.dc2") == 1  # said once, not echoed twice


def test_an_address_typo_is_still_shown_as_written() -> None:
    error = config_error({**BASE, DC2 + "BOOTSTRAP_SERVERS": "kafka-1.dc2:9092,kafka-2.dc2"})
    assert "kafka-2.dc2" in error.message and "':' missing" in error.message
    assert error.message.count("kafka-2.dc2") == 1


@pytest.mark.parametrize(
    "variable",
    [DC2 + "SECURITY_PROTOCOL", DC2 + "SASL_MECHANISM", "REPLICATOR_HTTP_PORT"],
)
def test_a_credential_typed_into_another_variable_is_not_echoed(variable: str) -> None:
    error = config_error({**BASE, variable: f"user:{CANARY}@x"})
    assert error.variable == variable
    assert CANARY not in str(error)


def test_an_ordinary_invalid_value_is_still_echoed() -> None:
    assert "'LOUD'" in config_error({**BASE, "REPLICATOR_LOG_LEVEL": "LOUD"}).message


# Issue 27: first-contact rough edges.


@pytest.mark.parametrize(
    ("written", "level"),
    [("debug", "DEBUG"), ("Info", "INFO"), ("warning", "WARNING"), (" ERROR ", "ERROR")],
)
def test_log_levels_are_accepted_in_any_case(written: str, level: str) -> None:
    assert load_settings({**BASE, "REPLICATOR_LOG_LEVEL": written}).log_level == level


def test_log_formats_are_accepted_in_any_case() -> None:
    assert load_settings({**BASE, "REPLICATOR_LOG_FORMAT": "JSON"}).log_format == "json"


@pytest.mark.parametrize("written", ["verbose", "trace", "Loud"])
def test_an_unknown_log_level_is_still_refused_naming_the_variable(written: str) -> None:
    error = config_error({**BASE, "REPLICATOR_LOG_LEVEL": written})
    assert error.variable == "REPLICATOR_LOG_LEVEL"
    assert error.message == f"must be DEBUG, INFO, WARNING or ERROR, in any case (got {written!r})"


DC1 = "REPLICATOR_CLUSTERS__DC1__"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REPLICATOR_LOG_LEVEL", "loud"),
        ("REPLICATOR_LOG_FORMAT", "xml"),
        ("REPLICATOR_HTTP_PORT", "70000"),
        ("REPLICATOR_HTTP_PORT", "eighty"),
        ("REPLICATOR_COMPRESSION", "brotli"),
        ("REPLICATOR_LINGER_MS", "soon"),
        ("REPLICATOR_REPLICA_MODE", "maybe"),
        ("REPLICATOR_TOPICS_INCLUDE", "orders(["),
        ("REPLICATOR_SYNC_GROUPS", "[a-"),
        ("REPLICATOR_REPLICA_SUFFIX", " _R "),
        ("REPLICATOR_HEARTBEAT_TOPIC", "heart beats"),
        ("REPLICATOR_LOCAL_CLUSTER", "DC_1"),
        ("REPLICATOR_LOCAL_CLUSTER", "dc9"),
        ("REPLICATOR_DESTINATION_REPLICATION_FACTOR", "0"),
        (DC1 + "SECURITY_PROTOCOL", "TLS1"),
        (DC1 + "SASL_MECHANISM", "GSSAPI"),
        (DC1 + "ALLOW_INSECURE_PLAIN", "perhaps"),
        (DC1 + "SSL_CAFILE", "/nonexistent/ca.pem"),
        (DC2 + "BOOTSTRAP_SERVERS", "kafka-1.dc2"),
        (DC2 + "BOOTSTRAP_SERVERS", "kafka-1.dc2:9092,kafka-2.dc2"),
        ("REPLICATOR_FLOWS__F__NAMING", "mirror"),
    ],
)
def test_a_refusal_names_the_variable_and_says_the_value_once(variable: str, value: str) -> None:
    env = {**BASE, variable: value}
    if variable.startswith("REPLICATOR_FLOWS__F__"):
        env |= {"REPLICATOR_FLOWS__F__SOURCE": "dc1", "REPLICATOR_FLOWS__F__TARGET": "dc2"}
    error = config_error(env)
    assert error.variable == variable
    shown = value.strip() if "BOOTSTRAP" in variable else value
    # The bad part of a bootstrap list is shown bare; any other value quoted, as written.
    needle = shown.rsplit(",", 1)[-1] if "BOOTSTRAP" in variable else repr(shown)
    assert str(error).count(needle) == 1, str(error)
    assert "(got" not in error.message or error.message.count("(got") == 1


def test_an_invalid_cluster_alias_names_a_variable_of_its_block_and_the_alias_once() -> None:
    error = config_error({**BASE, "REPLICATOR_CLUSTERS__DC_2__BOOTSTRAP_SERVERS": "k:9092"})
    assert error.variable == "REPLICATOR_CLUSTERS__DC_2__BOOTSTRAP_SERVERS"
    assert error.message.count("'dc_2'") == 1


@pytest.mark.parametrize(
    ("extra", "variable", "protocol"),
    [
        ({"SASL_MECHANISM": "SCRAM-SHA-512"}, "SASL_MECHANISM", "PLAINTEXT (the default)"),
        (
            {"SECURITY_PROTOCOL": "PLAINTEXT", "SASL_MECHANISM": "PLAIN"},
            "SASL_MECHANISM",
            "PLAINTEXT,",
        ),
        (
            {"SECURITY_PROTOCOL": "SSL", "SASL_USERNAME": "alice", "SASL_PASSWORD": CANARY},
            "SASL_USERNAME",
            "SSL,",
        ),
        ({"SASL_PASSWORD": CANARY}, "SASL_PASSWORD", "PLAINTEXT (the default)"),
    ],
)
def test_sasl_settings_without_a_sasl_protocol_are_refused_naming_both(
    extra: dict[str, str], variable: str, protocol: str
) -> None:
    error = config_error({**BASE, **{DC2 + k: v for k, v in extra.items()}})
    assert error.variable == DC2 + variable
    assert f"{DC2}SECURITY_PROTOCOL={protocol}" in error.message
    assert f"set {DC2}SECURITY_PROTOCOL=SASL_SSL" in error.message
    assert CANARY not in str(error) and "alice" not in str(error)


def test_sasl_with_a_sasl_protocol_is_still_accepted() -> None:
    env = {
        **BASE,
        DC2 + "SECURITY_PROTOCOL": "SASL_SSL",
        DC2 + "SASL_MECHANISM": "SCRAM-SHA-512",
        DC2 + "SASL_USERNAME": "alice",
        DC2 + "SASL_PASSWORD": CANARY,
    }
    assert load_settings(env).clusters["dc2"].uses_sasl


# What the kubelet injects for a Service named replicator (enableServiceLinks, the default).
SERVICE_LINKS = {
    "REPLICATOR_PORT": "tcp://10.0.0.1:8080",
    "REPLICATOR_PORT_8080_TCP": "tcp://10.0.0.1:8080",
    "REPLICATOR_PORT_8080_TCP_PROTO": "tcp",
    "REPLICATOR_PORT_8080_TCP_PORT": "8080",
    "REPLICATOR_PORT_8080_TCP_ADDR": "10.0.0.1",
    "REPLICATOR_PORT_53_UDP": "udp://10.0.0.1:53",
    "REPLICATOR_PORT_9000_SCTP_ADDR": "10.0.0.1",
    "REPLICATOR_SERVICE_HOST": "10.0.0.1",
    "REPLICATOR_SERVICE_PORT": "8080",
    "REPLICATOR_SERVICE_PORT_HTTP": "8080",
    "REPLICATOR_SERVICE_PORT_HTTP_METRICS": "8080",  # a port named http-metrics
}


def test_kubernetes_service_link_variables_are_ignored_and_remembered_by_name() -> None:
    settings = load_settings({**BASE, **SERVICE_LINKS})
    assert settings.service_links == tuple(sorted(SERVICE_LINKS))
    assert settings.http_port == 8080
    assert "service_links" not in settings.masked()
    assert load_settings(BASE).service_links == ()


@pytest.mark.parametrize(
    "variable",
    [
        "REPLICATOR_PORTS",
        "REPLICATOR_PORT_8080",
        "REPLICATOR_PORT_8080_HTTP",
        "REPLICATOR_PORT_HTTP_TCP",
        "REPLICATOR_PORT_8080_TCP_HOST",
        "REPLICATOR_SERVICE_HOSTNAME",
        "REPLICATOR_SERVICE",
        "REPLICATOR_SERVICE_PORT_",
        "REPLICATOR_SERVICE_PORTS",
        "replicator_port",  # the kubelet writes upper case
        "REPLICATOR_HTTP_PORTS",
    ],
)
def test_names_near_the_service_links_are_still_refused_as_typos(variable: str) -> None:
    error = config_error({**BASE, variable: "8080"})
    assert error.variable == variable
    assert error.message.startswith("unknown setting (check the spelling")


def test_no_setting_is_named_like_a_service_link() -> None:
    from replicator.config.loading import is_service_link
    from replicator.config.settings import Settings

    shapes = ("10.0.0.1", "8080", "tcp", "tcp://10.0.0.1:8080")
    assert not [
        name
        for name in Settings.model_fields
        if any(is_service_link("REPLICATOR_" + name.upper(), value) for value in shapes)
    ]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REPLICATOR_PORT", "9090"),  # meant REPLICATOR_HTTP_PORT: a typo, not a service link
        ("REPLICATOR_PORT", "tcp://replicator:8080"),
        ("REPLICATOR_SERVICE_HOST", "replicator.svc"),
        ("REPLICATOR_SERVICE_PORT", "http"),
        ("REPLICATOR_SERVICE_PORT_HTTP", "70000"),
        ("REPLICATOR_PORT_8080_TCP_PROTO", "http"),
        ("REPLICATOR_PORT_8080_TCP_ADDR", "10.0.0"),
        ("REPLICATOR_PORT_8080_TCP", "10.0.0.1:8080"),
    ],
)
def test_a_service_link_name_with_a_value_the_kubelet_never_writes_is_refused(
    variable: str, value: str
) -> None:
    error = config_error({**BASE, variable: value})
    assert error.variable == variable
    assert error.message.startswith("unknown setting (check the spelling")


def test_service_links_of_an_ipv6_cluster_are_ignored_too() -> None:
    links = {
        "REPLICATOR_PORT": "tcp://[fd00::1]:8080",
        "REPLICATOR_SERVICE_HOST": "fd00::1",
        "REPLICATOR_PORT_8080_TCP_ADDR": "fd00::1",
    }
    assert load_settings({**BASE, **links}).service_links == tuple(sorted(links))


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("REPLICATOR_PORT", "REPLICATOR_HTTP_PORT"),
        ("REPLICATOR_LOG_LEVLE", "REPLICATOR_LOG_LEVEL"),
        (
            "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVER",
            "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS",
        ),
        ("REPLICATOR_FLOWS__F__SORUCE", "REPLICATOR_FLOWS__F__SOURCE"),
    ],
)
def test_an_unknown_setting_names_the_one_it_most_likely_meant(variable: str, meant: str) -> None:
    error = config_error({**BASE, variable: "9090"})
    assert error.variable == variable
    assert error.message == f"unknown setting (check the spelling; did you mean {meant}?)"


@pytest.mark.parametrize("variable", ["REPLICATOR_XYZ", "REPLICATOR_CLUSTERS__DC2"])
def test_an_unknown_setting_like_none_suggests_nothing(variable: str) -> None:
    assert config_error({**BASE, variable: "1"}).message == "unknown setting (check the spelling)"


def test_acl_sync_policies_are_checked_where_they_are_set() -> None:
    flow = {
        "REPLICATOR_FLOWS__EU__SOURCE": "dc2",
        "REPLICATOR_FLOWS__EU__TARGET": "dc1",
        "REPLICATOR_FLOWS__EU__NAMING": "source-alias",
    }
    settings = load_settings({**BASE, **flow, "REPLICATOR_FLOWS__EU__ACL_SYNC": "mm2"})
    assert settings.flows["eu"].acl_sync.value == "mm2" and settings.acl_sync.value == "off"
    renamed = config_error({**BASE, **flow, "REPLICATOR_FLOWS__EU__ACL_SYNC": "movable"})
    assert renamed.variable == "REPLICATOR_FLOWS__EU__ACL_SYNC"
    assert "NAMING=identity" in renamed.message
    assert config_error({**BASE, "REPLICATOR_ACL_SYNC": "mm2"}).variable == "REPLICATOR_ACL_SYNC"
    assert config_error({**BASE, "REPLICATOR_ACL_SYNC": "all"}).variable == "REPLICATOR_ACL_SYNC"
    short = config_error({**BASE, "REPLICATOR_ACL_SYNC_INTERVAL_MS": "10"})
    assert short.variable == "REPLICATOR_ACL_SYNC_INTERVAL_MS"
    moving = load_settings({**BASE, "REPLICATOR_ACL_SYNC": "movable"})
    assert moving.acl_sync.value == "movable" and moving.acl_sync_interval_ms == 60_000


def test_the_replica_modes_acl_sync_without_the_replica_mode_is_refused() -> None:
    flow = {
        "REPLICATOR_REPLICA_MODE": "false",
        "REPLICATOR_FLOWS__EU__SOURCE": "dc2",
        "REPLICATOR_FLOWS__EU__TARGET": "dc1",
    }
    refused = config_error({**BASE, **flow, "REPLICATOR_ACL_SYNC": "movable"})
    assert refused.variable == "REPLICATOR_ACL_SYNC"
    assert "FLOWS__<NAME>__ACL_SYNC" in refused.message
