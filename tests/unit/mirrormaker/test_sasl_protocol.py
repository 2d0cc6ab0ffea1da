"""SASL properties with a security.protocol that uses no SASL, in MirrorMaker files: MirrorMaker
runs such a file (Kafka's clients ignore them), so it runs here too, unchanged, and the
translation says, for each, that the cluster is reached without authenticating and how to use
them. (The REPLICATOR_* variables refuse the same mix: tests/unit/config/test_settings.py.)"""

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
    notes_by_key,
    plain_configs,
    translate,
)

UNUSED = "ignored: security.protocol is {protocol}, without SASL: cluster {alias} is reached"


@pytest.fixture
def plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return plain_configs(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("consumer", "key", "protocol"),
    [
        (
            "security.protocol=PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n",
            "sasl.mechanism",
            "PLAINTEXT",
        ),
        ("security.protocol=SSL\nsasl.mechanism=PLAIN\n" + PLAIN_JAAS, "sasl.jaas.config", "SSL"),
        (PLAIN_JAAS, "sasl.jaas.config", "PLAINTEXT"),
        (f"sasl.username=alice\nsasl.password={SECRET}\n", "sasl.password", "PLAINTEXT"),
        # Two different values of an ignored property do not abort the translation.
        ("consumer.sasl.jaas.config=x\n" + PLAIN_JAAS, "sasl.jaas.config", "PLAINTEXT"),
    ],
)
def test_sasl_in_a_file_without_a_sasl_protocol_runs_and_says_it_is_unused(
    plain: Path, consumer: str, key: str, protocol: str
) -> None:
    translation = translate(plain, consumer)
    settings = translation.settings()
    (source,) = (c for c in settings.clusters.values() if c.bootstrap_servers[0].startswith("s"))
    assert source.sasl_mechanism is None and source.sasl_username is None
    said = notes_by_key(translation)[key]
    assert UNUSED.format(protocol=protocol, alias="s1") in said, said
    assert "set security.protocol=SASL_SSL or SASL_PLAINTEXT to use them" in said
    assert SECRET not in " ".join(translation.notes) and "alice" not in " ".join(translation.notes)


def test_sasl_tuning_alone_is_noted_without_the_credentials_warning(plain: Path) -> None:
    translation = translate(plain, "sasl.kerberos.service.name=kafka\n")
    said = notes_by_key(translation)["sasl.kerberos.service.name"]
    assert said.endswith("ignored: security.protocol is PLAINTEXT, without SASL"), said
    translation.settings()


def test_mm2_top_level_sasl_with_one_cluster_on_plaintext_is_noted_for_that_cluster(
    tmp_path: Path,
) -> None:
    """A common MirrorMaker 2 layout: SASL at the top level, the protocol given for the clusters
    that use it. A cluster without SASL connects without it, as MirrorMaker 2 would, and says so."""
    for layout in (
        "security.protocol=SASL_SSL\nus_west.security.protocol=PLAINTEXT\n",
        "A.security.protocol=SASL_SSL\n",
    ):
        translation = mm2(
            tmp_path,
            TWO + "A->us_west.enabled=true\nsasl.mechanism=PLAIN\n" + PLAIN_JAAS + layout,
        )
        settings = translation.settings()
        assert settings.clusters["a"].sasl_mechanism is not None
        assert settings.clusters["us-west"].sasl_mechanism is None
        assert any(
            "cluster us-west is reached without authenticating" in n for n in translation.notes
        )


def test_the_mm1_command_line_runs_it_too(plain: Path) -> None:
    (plain / "dst.properties").write_text(
        "bootstrap.servers=t1:9092\nsecurity.protocol=PLAINTEXT\nsasl.mechanism=PLAIN\n"
    )
    translation = mirror_maker_translation([*BASE, "--whitelist", ".*"])
    assert translation.settings().clusters["t1"].sasl_mechanism is None
    assert any("reached without authenticating" in n for n in translation.notes)
