"""The result of a translation, and the builder both translations fill.

This module owns :class:`Translation` (the ``REPLICATOR_*`` variables, the notes and each
variable's origin; its validation, with errors re-attributed to the option or property behind
the variable; its masked and env-file forms; the operator's own variables added) and
:class:`Builder`, which accumulates variables with their origins and notes (each once, in
order). Variable names are built here (:func:`cluster_var`, :func:`flow_var`), and the env file
says once which of them a shell cannot ``export``. SASL passwords are the secrets: they are masked
wherever a translation is shown. Of the cluster variables, only the operator's opt-ins that no
MirrorMaker property can say (``REPLICATOR_CLUSTERS__<ALIAS>__ALLOW_INSECURE_PLAIN``) are taken
from the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from replicator.config.loading import is_service_link, load_settings
from replicator.config.settings import Settings
from replicator.config.values import ENV_PREFIX, NESTED_DELIMITER
from replicator.errors import ConfigError

_SECRET_SUFFIX = NESTED_DELIMITER + "SASL_PASSWORD"
# Cluster settings a MirrorMaker configuration cannot give: taken from the operator's environment.
_OPERATOR_CLUSTER_FIELDS = ("ALLOW_INSECURE_PLAIN",)
_TOPOLOGY = (f"{ENV_PREFIX}LOCAL_CLUSTER", f"{ENV_PREFIX}REPLICA_MODE")


def cluster_var(alias: str, field_name: str) -> str:
    """``CLUSTERS__<ALIAS>__<FIELD>`` (without the prefix, as :meth:`Builder.set` takes it)."""
    return f"CLUSTERS{NESTED_DELIMITER}{alias.upper()}{NESTED_DELIMITER}{field_name}"


def flow_var(flow: str, field_name: str) -> str:
    """``FLOWS__<NAME>__<FIELD>`` (without the prefix, as :meth:`Builder.set` takes it)."""
    return f"FLOWS{NESTED_DELIMITER}{flow.upper()}{NESTED_DELIMITER}{field_name}"


@dataclass(frozen=True)
class Translation:
    """The replicator's configuration for a MirrorMaker configuration.

    ``env``: ``REPLICATOR_*`` variables; ``notes``: one line per option or property accepted but
    done another way (or ignored); ``origins``: each variable's option or property (with its
    file), for messages.
    """

    env: dict[str, str]
    notes: tuple[str, ...]
    origins: dict[str, str]

    def settings(self) -> Settings:
        """The validated settings; an error names the option or property behind the variable."""
        try:
            return load_settings(self.env)
        except ConfigError as exc:
            origin = self.origins.get(exc.variable)
            if origin is None:
                raise
            raise ConfigError(origin, f"{exc.message} (as {exc.variable})") from None

    def shown_env(self) -> dict[str, str]:
        """``env`` with every secret replaced by ``<secret: from FILE>``."""
        return {
            name: _masked(self.origins.get(name, "")) if _is_secret(name) else value
            for name, value in self.env.items()
        }

    def env_file(self) -> list[str]:
        """The lines of an env file (``docker run --env-file``, a Kubernetes ``envFrom``):
        ``NAME=value`` taken literally, then each note as a ``#`` comment. A secret is a bare
        ``NAME`` line, which ``docker run --env-file`` takes from the environment it runs in
        (its value never printed). A value holding a line break cannot be written so: refused,
        naming its origin."""
        lines = []
        for name, value in self.env.items():
            if _is_secret(name):
                lines.append(name)
                continue
            if "\n" in value or "\r" in value:
                raise ConfigError(
                    self.origins.get(name, name),
                    f"holds a line break, which an env file cannot hold (as {name})",
                )
            lines.append(f"{name}={value}")
        notes = [*self.notes, *self.secret_notes(), *self.shell_notes()]
        lines += ["# " + " ".join(note.splitlines()) for note in notes]
        return lines

    def shell_file(self) -> list[str]:
        """The same variables as POSIX shell assignments (``set -a; . FILE`` exports them):
        each value single-quoted, so regexes and spaces arrive as given. A secret is a check
        that the environment already holds it (its value never printed). A variable name a
        shell cannot hold (a ``-`` from a cluster alias) is refused, naming it."""
        lines = []
        for name, value in self.env.items():
            if "-" in name:
                raise ConfigError(
                    self.origins.get(name, name),
                    f"{name} cannot be a shell variable (the '-' of a cluster alias): use "
                    "--print-env without --shell (an env file), or an alias without '-'",
                )
            if _is_secret(name):
                origin = re.sub(r"[^\w .,()/:=-]", "_", self.origins.get(name, "configuration"))
                lines.append(f': "${{{name}:?must be in the environment, see {origin}}}"')
                continue
            lines.append(f"{name}={_quoted(value)}")
        notes = [*self.notes, *self.secret_notes()]
        lines += ["# " + " ".join(note.splitlines()) for note in notes]
        return lines

    def secret_notes(self) -> list[str]:
        """One note per secret: its value is not printed, the environment must give it."""
        return [
            f"{name}: the secret of {self.origins.get(name, 'the configuration')} is not "
            "printed: set it in the environment that runs the replicator"
            for name in self.env
            if _is_secret(name)
        ]

    def shell_notes(self) -> list[str]:
        """One note if a variable name holds a ``-`` (a cluster alias's), which is a valid name
        for ``env``, Docker and Kubernetes but not for a POSIX shell's ``export``."""
        dashed = list(dict.fromkeys(_group(name) for name in self.env if "-" in name))
        if not dashed:
            return []
        return [
            f"{', '.join(dashed)}: a '-' in a variable name (from a cluster alias) is fine for "
            "env(1), docker run --env-file and a Kubernetes env list, but a POSIX shell cannot "
            "export it"
        ]

    def with_environment(self, environ: Mapping[str, str]) -> Translation:
        """This translation plus the operator's own top-level ``REPLICATOR_*`` variables.

        ``REPLICATOR_HTTP_PORT``, ``REPLICATOR_LOG_LEVEL`` and the like from ``environ`` are
        added, and override a translated value (with a note). Clusters, flows, the local
        cluster and the mode come from the MirrorMaker configuration only: such variables in
        ``environ`` are left out, with a note; but an opt-in no MirrorMaker property can say
        (``REPLICATOR_CLUSTERS__<ALIAS>__ALLOW_INSECURE_PLAIN``) of a translated cluster is
        added.
        """
        env, origins, notes = dict(self.env), dict(self.origins), list(self.notes)
        owned = (f"{ENV_PREFIX}CLUSTERS{NESTED_DELIMITER}", f"{ENV_PREFIX}FLOWS{NESTED_DELIMITER}")
        for name, value in sorted(environ.items()):
            upper = name.upper()
            if not upper.startswith(ENV_PREFIX) or is_service_link(name, value):
                continue  # not ours, or the kubelet's (a Service named replicator)
            if self._operator_cluster_setting(upper):
                env[upper] = value
                origins[upper] = f"{name} (in the environment)"
                continue
            if upper.startswith(owned) or upper in _TOPOLOGY:
                notes.append(
                    f"{name} (in the environment): ignored: clusters, flows and the local cluster "
                    "come from the MirrorMaker configuration"
                )
                continue
            if upper in env and env[upper] != value:
                notes.append(
                    f"{name} (in the environment): overrides {origins[upper]} "
                    f"({env[upper]} -> {value})"
                )
            env[upper] = value
            origins[upper] = f"{name} (in the environment)"
        return replace(self, env=env, origins=origins, notes=tuple(dict.fromkeys(notes)))

    def _operator_cluster_setting(self, name: str) -> bool:
        """``name`` is an operator's opt-in for a cluster of this translation."""
        head, _, field_name = name.rpartition(NESTED_DELIMITER)
        servers = f"{head}{NESTED_DELIMITER}BOOTSTRAP_SERVERS"
        return (
            name.startswith(f"{ENV_PREFIX}CLUSTERS{NESTED_DELIMITER}")
            and field_name in _OPERATOR_CLUSTER_FIELDS
            and servers in self.env
        )


def _is_secret(name: str) -> bool:
    return name.upper().endswith(_SECRET_SUFFIX)


def _quoted(value: str) -> str:
    """``value`` as one POSIX shell word, taken literally (single quotes)."""
    return "'" + value.replace("'", "'\\''") + "'"


def _masked(origin: str) -> str:
    found = re.search(r"\(in (.+)\)$", origin)
    return f"<secret: from {found.group(1) if found else origin or 'the configuration'}>"


class Builder:
    """Collects variables with their origins, and notes (each once, in order)."""

    def __init__(self) -> None:
        self.env: dict[str, str] = {}
        self.origins: dict[str, str] = {}
        self.notes: list[str] = []

    def set(self, variable: str, value: str, origin: str) -> None:
        name = ENV_PREFIX + variable
        self.env[name] = value
        self.origins[name] = origin

    def set_global(self, variable: str, value: str, origin: str) -> None:
        """A setting that several files may give: the first one decides, a different later one
        is noted."""
        name = ENV_PREFIX + variable
        if name in self.env and self.env[name] != value:
            self.note(
                origin,
                f"ignored: {name} is one setting for every client and was already set to "
                f"{self.env[name]} by {self.origins[name]}",
            )
            return
        self.set(variable, value, origin)

    def topology(self, local: str, local_origin: str, command: str) -> None:
        """The local cluster (``local_origin`` chose it), and flows only: no ``_REPLICA`` mode."""
        self.set("LOCAL_CLUSTER", local, local_origin)
        self.set("REPLICA_MODE", "false", f"replicator {command} (flows only)")

    def flow(
        self, flow: str, source: str, target: str, source_origin: str, target_origin: str
    ) -> None:
        self.set(flow_var(flow, "SOURCE"), source, source_origin)
        self.set(flow_var(flow, "TARGET"), target, target_origin)

    def note(self, origin: str, text: str) -> None:
        line = f"{origin}: {text}"
        if line not in self.notes:
            self.notes.append(line)

    def translation(self) -> Translation:
        def rank(name: str) -> int:  # the topology, other settings, clusters, flows
            if name in _TOPOLOGY:
                return 0
            for number, kind in enumerate(("CLUSTERS", "FLOWS"), start=2):
                if name.startswith(f"{ENV_PREFIX}{kind}{NESTED_DELIMITER}"):
                    return number
            return 1

        env = {name: self.env[name] for name in sorted(self.env, key=rank)}
        return Translation(env, tuple(self.notes), dict(self.origins))


def _group(name: str) -> str:
    """``REPLICATOR_CLUSTERS__US-WEST__*`` for every variable of that block."""
    head, delimiter, _ = name.rpartition(NESTED_DELIMITER)
    return f"{head}{delimiter}*" if delimiter else name
