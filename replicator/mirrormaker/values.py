"""Property values as MirrorMaker reads them: properties files, booleans, whole numbers, lists.

Each reader raises :class:`~replicator.errors.ConfigError` naming the option or property it was
given (``origin``), never quoting more of the value than it must.
"""

from __future__ import annotations

from pathlib import Path

from replicator.errors import ConfigError, PropertiesError
from replicator.mirrormaker import properties


def load_properties(path: Path, origin: str) -> dict[str, str]:
    """The properties of a Java ``.properties`` file named by ``origin``."""
    try:
        return properties.load(path)
    except OSError as exc:
        raise ConfigError(origin, f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(origin, f"{path} is not a UTF-8 text file") from None
    except PropertiesError as exc:
        raise ConfigError(origin, f"{path}: {exc}") from None


def parse_bool(value: str) -> bool | None:
    """``True``/``False`` for the spellings MirrorMaker's tools accept, ``None`` otherwise."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "t", "yes"):
        return True
    if lowered in ("false", "0", "f", "no"):
        return False
    return None


def parse_int(value: str, origin: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(origin, f"expected a whole number, got {value.strip()!r}") from None


def split_list(value: str) -> list[str]:
    """A comma list's non-empty items, stripped."""
    return [part.strip() for part in value.split(",") if part.strip()]
