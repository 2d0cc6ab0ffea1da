"""SASL properties with a security.protocol that uses no SASL: refused where they were meant for
that cluster (as REPLICATOR_* variables are), ignored with a note where they are MirrorMaker 2's
top-level defaults overridden for one cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.mirrormaker import mirror_maker_translation
from tests.unit.mirrormaker.test_support import (
    BASE,
    PLAIN_JAAS,
    SECRET,
    TWO,
    mm2,
    mm2_error,
    notes_by_key,
    plain_configs,
    refusal,
    translate,
)


@pytest.fixture
def plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return plain_configs(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("consumer", "key", "said"),
    [
        (
            "security.protocol=PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n",
            "sasl.mechanism",
            "security.protocol (in src.properties) is PLAINTEXT",
        ),
        (
            "security.protocol=SSL\nsasl.mechanism=PLAIN\n" + PLAIN_JAAS,
            "sasl.mechanism",
            "security.protocol (in src.properties) is SSL",
        ),
        (
            PLAIN_JAAS,
            "sasl.jaas.config",
            "security.protocol is not given (PLAINTEXT, Kafka's default)",
        ),
        (
            f"sasl.username=alice\nsasl.password={SECRET}\n",
            "sasl.username",
            "security.protocol is not given",
        ),
    ],
)
def test_sasl_in_a_file_without_a_sasl_protocol_is_refused_naming_both(
    plain: Path, consumer: str, key: str, said: str
) -> None:
    error = refusal(translate, plain, consumer)
    assert error.variable == f"{key} (in src.properties)"
    assert said in error.message
    assert "set security.protocol=SASL_SSL (or SASL_PLAINTEXT)" in error.message
    assert SECRET not in str(error) and "alice" not in str(error)


def test_sasl_tuning_alone_is_still_only_noted(plain: Path) -> None:
    translation = translate(plain, "sasl.kerberos.service.name=kafka\n")
    assert (
        "ignored: security.protocol is PLAINTEXT"
        in notes_by_key(translation)["sasl.kerberos.service.name"]
    )
    translation.settings()


def test_mm2_top_level_sasl_with_one_cluster_on_plaintext_is_noted_for_that_cluster(
    tmp_path: Path,
) -> None:
    """MirrorMaker 2's top level applies to every cluster; a cluster's own PLAINTEXT overrides
    it: that cluster connects without SASL, as MirrorMaker 2 would, and says so."""
    translation = mm2(
        tmp_path,
        TWO
        + "A->us_west.enabled=true\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        + PLAIN_JAAS
        + "us_west.security.protocol=PLAINTEXT\n",
    )
    settings = translation.settings()
    assert settings.clusters["a"].sasl_mechanism is not None
    assert settings.clusters["us-west"].sasl_mechanism is None
    assert any("without SASL" in note for note in translation.notes)


def test_mm2_cluster_sasl_under_a_plaintext_protocol_is_refused(tmp_path: Path) -> None:
    error = mm2_error(
        tmp_path,
        TWO + "A->us_west.enabled=true\nus_west.sasl.mechanism=SCRAM-SHA-512\n",
    )
    assert error.variable.startswith("us_west.sasl.mechanism (in ")
    assert "security.protocol is not given" in error.message
    assert "set us_west.security.protocol=SASL_SSL" in error.message


def test_the_mm1_command_line_refuses_it_too(plain: Path) -> None:
    (plain / "dst.properties").write_text(
        "bootstrap.servers=t1:9092\nsecurity.protocol=PLAINTEXT\nsasl.mechanism=PLAIN\n"
    )
    error = refusal(mirror_maker_translation, [*BASE, "--whitelist", ".*"])
    assert error.variable == "sasl.mechanism (in dst.properties)"
