"""Java properties files read as ``java.util.Properties.load`` reads them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator.errors import PropertiesError
from replicator.mirrormaker.properties import parse


def test_the_examples_of_the_java_documentation() -> None:
    text = (
        "Truth = Beauty\n"
        " Truth:Beauty\n"
        "Truth                    :Beauty\n"
        "fruits                           apple, banana, pear, \\\n"
        "                                  cantaloupe, watermelon, \\\n"
        "                                  kiwi, mango\n"
        "cheeses\n"
    )
    assert parse(text) == {
        "Truth": "Beauty",
        "fruits": "apple, banana, pear, cantaloupe, watermelon, kiwi, mango",
        "cheeses": "",
    }


def test_comments_blank_lines_and_a_later_key_winning() -> None:
    text = "# a comment\n! another\n\n   \nbootstrap.servers=a:9092\nbootstrap.servers = b:9092\n"
    assert parse(text) == {"bootstrap.servers": "b:9092"}


def test_a_comment_marker_inside_a_continued_value_is_data() -> None:
    assert parse("key = a\\\n#b\n") == {"key": "a#b"}


def test_escapes_in_keys_and_values() -> None:
    text = "a\\:b\\=c = x\\ty\\u0041\\\\z\nspace\\ key=v\n"
    assert parse(text) == {"a:b=c": "x\tyA\\z", "space key": "v"}


def test_a_sasl_jaas_config_survives_as_written() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="mirror" password="s3cr=t:";'
    )
    assert parse(f"sasl.jaas.config={jaas}\n") == {"sasl.jaas.config": jaas}


def test_the_first_separator_splits_and_the_rest_is_value() -> None:
    assert parse("url=http://host:8080/a=b\n") == {"url": "http://host:8080/a=b"}
    assert parse("key::value\n") == {"key": ":value"}


def test_a_malformed_unicode_escape_is_refused_with_its_line() -> None:
    with pytest.raises(PropertiesError, match="line 2"):
        parse("ok=1\nbad=\\u12x4\n")


def _store(text: str, key: bool) -> str:
    """Escape as ``Properties.store`` does."""
    out = []
    for i, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "=:#!":
            out.append("\\" + char)
        elif char == " " and (key or i == 0):
            out.append("\\ ")
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


_TEXT = st.text(alphabet=st.characters(max_codepoint=0xFFFF, codec="utf-8"))


@given(st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=8))
def test_what_java_would_store_reads_back_the_same(properties: dict[str, str]) -> None:
    text = "".join(f"{_store(k, True)}={_store(v, False)}\n" for k, v in properties.items())
    assert parse(text) == properties
