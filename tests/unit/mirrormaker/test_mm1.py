"""MirrorMaker 1 and Go mirror maker command lines: options, topic rules, aliases, flows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replicator.config.values import DEFAULT_TOPICS_EXCLUDE
from replicator.mirrormaker import mirror_maker_translation
from replicator.mirrormaker.mm1 import server_alias
from replicator.mirrormaker.names import flow_name
from tests.unit.mirrormaker import test_support as support
from tests.unit.mirrormaker.test_support import BASE, F, refusal, write


@pytest.fixture
def plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return support.plain_configs(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("args", "variable", "words"),
    [
        (["--whitelist", "a", "--frobnicate", "1"], "--frobnicate", "unknown MirrorMaker option"),
        (["-whitelist", "a", "-frob"], "-frob", "unknown"),
        ([], "--whitelist", "exactly one of"),
        (["--whitelist", "a", "--blacklist", "b"], "--blacklist", "exactly one of"),
        (["--include", "a", "--whitelist", "b"], "--whitelist", "exactly one of"),
        (["--whitelist", "a", "--whitelist", "b"], "--whitelist", "given twice"),
        (["--whitelist", "a", "--preserve.partitions=maybe"], "--preserve.partitions", "false"),
        (["--whitelist", "a", "--message.handler", "com.X"], "--message.handler", "handlers"),
        (["--whitelist", "a", "--message.handler.args", "x"], "--message.handler.args", ""),
        (
            ["--whitelist", "a", "--consumer.rebalance.listener=X"],
            "--consumer.rebalance.listener",
            "",
        ),
        (["--whitelist", "a", "--num.streams", "many"], "--num.streams", "whole number"),
        (["--whitelist", "a", "--num.streams", "0"], "--num.streams", "positive"),
        (["--whitelist", "a", "stray"], "stray", "unexpected argument"),
        (["--whitelist"], "--whitelist", "needs a value"),
        (["--whitelist", "a", "--new.consumer=maybe"], "--new.consumer", "true or false"),
        (["--whitelist", "(unclosed"], "--whitelist", "not a valid regular expression"),
        (["--whitelist", "[a[b]]"], "--whitelist", "Java-only"),
        (["--whitelist", r"\p{Alpha}+"], "--whitelist", "not a valid regular expression"),
    ],
)
def test_command_line_refusals_name_the_option(
    plain: Path, args: list[str], variable: str, words: str
) -> None:
    error = refusal(mirror_maker_translation, [*BASE, *args])
    assert error.variable == variable
    assert words in error.message


def test_consumer_and_producer_configs_are_required(plain: Path) -> None:
    error = refusal(
        mirror_maker_translation, ["--producer.config", "dst.properties", "--whitelist", "a"]
    )
    assert error.variable == "--consumer.config"
    error = refusal(
        mirror_maker_translation, ["--consumer.config", "src.properties", "--whitelist=a"]
    )
    assert error.variable == "--producer.config"
    error = refusal(
        mirror_maker_translation,
        ["--consumer.config=nope.properties", "--producer.config=dst.properties", "--whitelist=a"],
    )
    assert error.variable == "--consumer.config"
    assert "cannot read nope.properties" in error.message


def test_options_accepted_and_translated(plain: Path) -> None:
    args = [
        *BASE,
        "--include=orders, payments",
        "--offset.commit.interval.ms=60000",
        "--abort.on.send.failure",
        "false",
        "--abortOnSendFail",
        "--preserve.order=true",
        "--new.consumer",
        "--num.producers",
        "3",
        "--preserve.partitions=true",
        "-max.procs",
        "4",
    ]
    translation = mirror_maker_translation(args)
    assert translation.env[F + "TOPICS_INCLUDE"] == "orders|payments"
    assert translation.env["REPLICATOR_COMMIT_INTERVAL_MS"] == "60000"
    shown = [n.split(":", 1)[0] for n in translation.notes]
    for option in (
        "--abort.on.send.failure",
        "--abortOnSendFail",
        "--preserve.order",
        "--new.consumer",
        "--num.producers",
        "-max.procs",
    ):
        assert shown.count(option) == 1, option
    assert F + "PRESERVE_PARTITIONS" not in translation.env  # true: the default
    assert not any(n.startswith("--preserve.partitions") for n in translation.notes)
    settings = translation.settings()
    assert settings.commit_interval_ms == 60000
    assert settings.flows["s1_to_t1"].group_id == "g"
    assert settings.flows["s1_to_t1"].preserve_partitions


def test_blacklist_keeps_the_internal_topic_exclusion(plain: Path) -> None:
    translation = mirror_maker_translation([*BASE, "--blacklist", "'secret.*,audit'"])
    assert translation.env[F + "TOPICS_EXCLUDE"] == f"{DEFAULT_TOPICS_EXCLUDE}|secret.*|audit"
    assert F + "TOPICS_INCLUDE" not in translation.env
    assert translation.settings().flows["s1_to_t1"].topics_include == ".*"


@pytest.mark.parametrize(
    ("whitelist", "expected"),
    [
        ("orders*+", "orders*+"),  # possessive: Python 3.11 reads it as Java does
        (r"\Qa.b\E.*", r"a\.b.*"),
        ("*-events", ".*-events"),
        ('"*.internal,__.*"', ".*.internal|__.*"),
        ("(?i)orders", "(?i)orders"),
    ],
)
def test_java_regexes(plain: Path, whitelist: str, expected: str) -> None:
    translation = mirror_maker_translation([*BASE, "--whitelist", whitelist])
    assert translation.env[F + "TOPICS_INCLUDE"] == expected
    translation.settings()


def test_aliases_from_file_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for directory in ("a", "b", "c"):
        (tmp_path / directory).mkdir()
        write(
            tmp_path / directory, "DC_1 Kafka.properties", f"bootstrap.servers={directory}:9092\n"
        )
    args = ["--consumer.config", "a/DC_1 Kafka.properties", "--consumer.config"]
    args += [
        "b/DC_1 Kafka.properties",
        "--producer.config",
        "c/DC_1 Kafka.properties",
        "-whitelist",
        "x",
    ]
    env = mirror_maker_translation(args).env
    # Files of one name name three clusters: each is named by its brokers, not its file.
    assert env["REPLICATOR_LOCAL_CLUSTER"] == "c"
    assert env["REPLICATOR_FLOWS__A_TO_C__SOURCE"] == "a"
    assert env["REPLICATOR_FLOWS__B_TO_C__SOURCE"] == "b"
    assert env["REPLICATOR_CLUSTERS__B__BOOTSTRAP_SERVERS"] == "b:9092"


def test_long_names_give_short_flow_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    long = "x" * 80
    write(tmp_path, f"{long}-source.properties", "bootstrap.servers=a:1\n")
    write(tmp_path, f"{long}-target.properties", "bootstrap.servers=b:1\n")
    args = ["--consumer.config", f"{long}-source.properties"]
    args += ["--producer.config", f"{long}-target.properties", "--whitelist", "x"]
    settings = mirror_maker_translation(args).settings()
    (name,) = settings.flows
    assert len(name) <= 63


def test_same_brokers_as_source_and_target_need_a_prefix(plain: Path) -> None:
    write(plain, "dst.properties", "bootstrap.servers=s1:9092\n")
    error = refusal(mirror_maker_translation, [*BASE, "--whitelist", "a"])
    assert error.variable == "bootstrap.servers (in src.properties)"
    mirror_maker_translation([*BASE, "--whitelist", "a", "--prefix", "copy."]).settings()


@pytest.mark.parametrize(
    "spelling",
    [
        ["--preserve.partitions=false"],
        ["--preserve.partitions", "false"],
        ["-preserve.partitions", "0"],
        ["--preserve.partitions=f"],
        ["--preserve.partitions=FALSE"],
    ],
)
def test_preserve_partitions_false_places_records_by_key_in_every_flow(
    plain: Path, spelling: list[str]
) -> None:
    write(plain, "other.properties", "bootstrap.servers=o1:9092\ngroup.id=h\n")
    args = [*BASE, "--consumer.config", "other.properties", "--whitelist", "a", *spelling]
    translation = mirror_maker_translation(args)
    flows = ("REPLICATOR_FLOWS__S1_TO_T1__", "REPLICATOR_FLOWS__O1_TO_T1__")
    for flow in flows:
        assert translation.env[flow + "PRESERVE_PARTITIONS"] == "false"
        assert translation.origins[flow + "PRESERVE_PARTITIONS"] == spelling[0].split("=")[0]
    settings = translation.settings()
    assert not settings.flows["s1_to_t1"].preserve_partitions
    assert not settings.flows["o1_to_t1"].preserve_partitions
    notes = "\n".join(translation.notes)
    assert "placed by key as a Kafka producer places them" in notes
    assert "--preserve.partitions (absent)" not in notes
    assert "land in one target topic, each record placed by key" in notes  # aggregation


def test_without_preserve_partitions_partition_numbers_are_kept_with_a_note(plain: Path) -> None:
    translation = mirror_maker_translation([*BASE, "--whitelist", "a"])
    assert F + "PRESERVE_PARTITIONS" not in translation.env
    assert translation.settings().flows["s1_to_t1"].preserve_partitions
    (note,) = [n for n in translation.notes if n.startswith("--preserve.partitions")]
    assert note.startswith("--preserve.partitions (absent): records keep their source partition")
    assert "place them by key unless told to preserve partitions" in note
    assert "--preserve.partitions=false places them by key" in note


def test_flow_names_are_exportable_and_aliases_keep_their_dashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "east.properties", "bootstrap.servers=us-east:9092\n")
    write(tmp_path, "west.properties", "bootstrap.servers=eu-west:9092\n")
    args = ["--consumer.config", "east.properties", "--producer.config", "west.properties"]
    translation = mirror_maker_translation([*args, "--whitelist", "x"])
    env = translation.env
    assert env["REPLICATOR_FLOWS__US_EAST_TO_EU_WEST__SOURCE"] == "us-east"
    assert env["REPLICATOR_FLOWS__US_EAST_TO_EU_WEST__TARGET"] == "eu-west"
    flows = [name for name in env if name.startswith("REPLICATOR_FLOWS__")]
    assert flows and all(re.fullmatch(r"[A-Z0-9_]+", name) for name in flows)
    settings = translation.settings()
    assert sorted(settings.clusters) == ["eu-west", "us-east"]
    assert list(settings.flows) == ["us_east_to_eu_west"]
    assert not any("cannot export" in n for n in translation.notes)  # not logged at run time
    assert [line for line in translation.env_file() if "cannot export" in line] == [
        "# REPLICATOR_CLUSTERS__US-EAST__*, REPLICATOR_CLUSTERS__EU-WEST__*: a '-' in a "
        "variable name (from a cluster alias) is fine for env(1), docker run --env-file and a "
        "Kubernetes env list, but a POSIX shell cannot export it"
    ]


def test_no_shell_note_when_every_name_is_exportable(plain: Path) -> None:
    translation = mirror_maker_translation([*BASE, "--whitelist", "a"])
    assert all(re.fullmatch(r"[A-Z0-9_]+", name) for name in translation.env)
    assert translation.shell_notes() == []
    assert not any("cannot export" in line for line in translation.env_file())


def test_flow_names_that_collide_once_dashes_are_underscores_are_numbered() -> None:
    taken: set[str] = set()
    assert flow_name("a-to-b", "c", taken) == "a_to_b_to_c"
    assert flow_name("a", "b-to-c", taken) == "a_to_b_to_c_2"
    assert all(re.fullmatch(r"[a-z0-9]([a-z0-9_]*[a-z0-9])?", name) for name in taken)


@pytest.mark.parametrize(
    ("options", "reset", "tool", "start"),
    [
        # The Go mirror maker's own flags: its consumer always started from the earliest record.
        (["--prefix", "dc1_", "--preserve.order", "--num.producers", "2"], "", "Go", "earliest"),
        (["--preserve.partitions", "--queue.size", "100"], "", "Go", "earliest"),
        (["-max.procs", "2"], "", "Go", "earliest"),
        (["--preserve.order"], "auto.offset.reset=latest\n", "Go", "latest"),
        # MirrorMaker 1 (its flags are the Go tool's too, but none of the Go tool's own): Kafka's.
        (["--num.streams", "2", "--num.producers", "2"], "", "MirrorMaker 1", "latest"),
        (["--queue.size", "100"], "", "MirrorMaker 1", "latest"),
        ([], "auto.offset.reset=smallest\n", "MirrorMaker 1", "earliest"),
    ],
)
def test_each_tools_defaults_apply_to_its_command_line(
    plain: Path, options: list[str], reset: str, tool: str, start: str
) -> None:
    write(plain, "src.properties", "bootstrap.servers=s1:9092\ngroup.id=g\n" + reset)
    translation = mirror_maker_translation([*BASE, "--whitelist", ".*", *options])
    assert translation.env[F + "START_FROM"] == start
    recognised = [n for n in translation.notes if "recognised as" in n]
    assert len(recognised) == 1 and tool in recognised[0], translation.notes
    if not reset:
        (default,) = [n for n in translation.notes if n.startswith("auto.offset.reset")]
        assert f"absent: {'the Go mirror maker' if tool == 'Go' else tool}'s default" in default
        assert start in default
    assert translation.settings().flows["s1_to_t1"].start_from.value == start


def test_a_cluster_is_named_by_its_files_alias_property_else_by_its_brokers_with_a_note(
    plain: Path,
) -> None:
    write(plain, "src.properties", "bootstrap.servers=s1:9092\ngroup.id=g\n")
    write(plain, "dst.properties", "bootstrap.servers=t1:9092\nreplicator.cluster.alias=DC2\n")
    translation = mirror_maker_translation([*BASE, "--whitelist", ".*"])
    assert translation.env["REPLICATOR_LOCAL_CLUSTER"] == "dc2"
    assert translation.env["REPLICATOR_FLOWS__S1_TO_DC2__SOURCE"] == "s1"
    (named,) = [n for n in translation.notes if n.startswith("replicator.cluster.alias (in src")]
    assert "called s1, after its first bootstrap server" in named
    assert "replicator.cluster.alias=src)" in named  # how an upgraded deployment keeps its name
    assert "src" not in translation.settings().clusters  # never the file's name
    assert not any("not used" in n and "replicator.cluster.alias" in n for n in translation.notes)
    write(plain, "src.properties", "bootstrap.servers=s1:9092\nreplicator.cluster.alias=dc2\n")
    refused = refusal(lambda: mirror_maker_translation([*BASE, "--whitelist", ".*"]))
    assert refused.variable == "replicator.cluster.alias (in src.properties)"
    assert "dc2" in refused.message


def test_a_clusters_default_alias_comes_from_its_brokers_not_its_file() -> None:
    """The same brokers listed in any order give one name; Kafka's port is left out, any other
    kept; an entry that is not a plain host:port (credentials written into it) never names it."""
    assert server_alias("kafka-2.dc1:9092,kafka-1.dc1:9092") == "kafka-1-dc1"
    assert server_alias(" kafka-1.dc1:9092 , kafka-2.dc1:9092") == "kafka-1-dc1"
    assert server_alias("Kafka-2.DC1:9092,kafka-1.dc1:9092") == "kafka-1-dc1"  # case ignored
    assert server_alias("10.0.0.7:9093") == "10-0-0-7-9093"
    assert server_alias("user:secret@b1:9092,b2:9092") == "b2"
    assert server_alias("user:secret@b1:9092") is None
    assert server_alias(None) is None


def test_a_named_alias_is_reserved_whatever_the_order_of_the_files(plain: Path) -> None:
    """A source naming the alias the target's brokers would give keeps it; the target is
    numbered (was: refused, as if another file had named it)."""
    write(plain, "dst.properties", "bootstrap.servers=dc2:9092\n")
    write(plain, "src.properties", "bootstrap.servers=s1:9092\nreplicator.cluster.alias=dc2\n")
    env = mirror_maker_translation([*BASE, "--whitelist", ".*", "--prefix", "x."]).env
    assert env["REPLICATOR_LOCAL_CLUSTER"] == "dc2-2"
    assert env["REPLICATOR_FLOWS__DC2_TO_DC2_2__SOURCE"] == "dc2"
