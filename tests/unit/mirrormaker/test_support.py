"""What the ``test_mirrormaker_*`` files share: the samples, their arguments, small helpers.

No tests here; each file defines its own fixtures from these helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from replicator.errors import ConfigError
from replicator.mirrormaker import Translation, mirror_maker_translation, mm2_translation

SAMPLES = Path(__file__).parents[1] / "samples" / "mirrormaker"
MM1_ARGS = [
    "--consumer.config",
    "sourceCluster1Consumer.config",
    "--consumer.config",
    "sourceCluster2Consumer.config",
    "--num.streams",
    "2",
    "--producer.config",
    "targetClusterProducer.config",
    "--whitelist=.*",
]
GO_ARGS = [*MM1_ARGS, "--prefix", "dc1_", "--preserve.partitions", "--queue.size", "10000"]
SECRET = "s3cr3t-pa55"
PLAIN_JAAS = (
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="alice" password="{SECRET}";\n'
)
SCRAM_JAAS = (
    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
    f'    username="bob" password="{SECRET}";\n'
)
# The minimal command line of plain_configs(), without its topic rule.
BASE = ["--consumer.config", "src.properties", "--producer.config", "dst.properties"]
F = "REPLICATOR_FLOWS__S1_TO_T1__"
C = "REPLICATOR_CLUSTERS__S1__"
T = "REPLICATOR_CLUSTERS__T1__"
TWO = "clusters=A, us_west\nA.bootstrap.servers=a:9092\nus_west.bootstrap.servers=w:9092\n"


def write(directory: Path, name: str, text: str) -> str:
    (directory / name).write_text(text)
    return name


def refusal(call: Callable[..., object], *args: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        call(*args)
    return caught.value


def mm1_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Cloudera sample with its third host written host:port, as real brokers need."""
    for sample in (SAMPLES / "mm1").iterdir():
        text = sample.read_text().replace("server3-6667", "server3:6667")
        (tmp_path / sample.name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def plain_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A consumer and a producer config, minimal (``BASE`` names them), as the working dir."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "src.properties", "bootstrap.servers=s1:9092\ngroup.id=g\n")
    write(tmp_path, "dst.properties", "bootstrap.servers=t1:9092\n")
    return tmp_path


def translate(plain: Path, consumer: str = "", producer: str = "") -> Translation:
    """``plain_configs`` with these properties added, whitelisting every topic."""
    write(plain, "src.properties", "bootstrap.servers=s1:9092\n" + consumer)
    write(plain, "dst.properties", "bootstrap.servers=t1:9092\n" + producer)
    return mirror_maker_translation([*BASE, "--whitelist", ".*"])


def mm2(tmp_path: Path, text: str) -> Translation:
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    return mm2_translation(path)


def mm2_error(tmp_path: Path, text: str) -> ConfigError:
    return refusal(mm2, tmp_path, text)


def notes_by_key(translation: Translation) -> dict[str, str]:
    """The notes keyed by their property (what precedes `` (in ``)."""
    return {n.split(" (in ", 1)[0]: n for n in translation.notes}
