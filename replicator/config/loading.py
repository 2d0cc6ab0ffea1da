"""Loading: the only reader of the environment.

Everything the replicator can be told comes from ``REPLICATOR_*`` environment variables, read once,
before the event loop starts, by :func:`load_settings` into a frozen
:class:`~replicator.config.settings.Settings` that is passed down. Invalid configuration raises
:class:`~replicator.errors.ConfigError` naming the variable at fault (a pydantic error is mapped to
its variable, :func:`env_name`); the CLI turns that into exit status 2. An unknown ``REPLICATOR_*``
variable is refused as a typo, with the setting it most likely meant, except the ones the kubelet
injects for a Service named ``replicator`` (:func:`is_service_link`), which are ignored and
remembered by name (:attr:`Settings.service_links
<replicator.config.settings.Settings.service_links>`). Once the model is built, the replicator's
own topics (heartbeats, checkpoints, dead letters) are checked against the topic rules: never
application topics (:func:`replicator.config.topology.internal_topic_problem` decides).
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

from replicator.config.clusters import ClusterSettings, FlowSettings
from replicator.config.settings import Settings
from replicator.config.topology import internal_topic_problem
from replicator.config.values import ENV_PREFIX, NESTED_DELIMITER, shown_value
from replicator.errors import ConfigError


class _MappingEnvSource(EnvSettingsSource):
    """Reads the environment handed to :func:`load_settings` instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ  # read by the base class's constructor
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ,
            self.case_sensitive,
            self.env_ignore_empty,
            self.env_parse_none_str,
        )


def env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable that a validation error location refers to."""
    return ENV_PREFIX + NESTED_DELIMITER.join(str(part).upper() for part in loc)


# The variables the kubelet injects into every pod of a namespace holding a Service named
# ``replicator`` (unless the pod says enableServiceLinks: false), in its documented format:
# {SVCNAME}_SERVICE_HOST, {SVCNAME}_SERVICE_PORT, {SVCNAME}_SERVICE_PORT_{PORTNAME} (the port's
# name, upper-cased, '-' as '_'), {SVCNAME}_PORT, {SVCNAME}_PORT_{PORT}_{PROTOCOL} and that
# followed by _PROTO, _PORT or _ADDR. Exactly these names, as the kubelet writes them (upper
# case): no setting is named so, and any other unknown REPLICATOR_* variable is still a typo.
# The value must have the kubelet's shape too, so that a typo such as REPLICATOR_PORT=9090 (for
# REPLICATOR_HTTP_PORT) is still refused rather than ignored.
_SERVICE_LINK = re.compile(
    rf"^{ENV_PREFIX}(?:(?P<host>SERVICE_HOST)|(?P<port>SERVICE_PORT(?:_[A-Z0-9_]+)?)|(?P<url>PORT)"
    r"|PORT_\d{1,5}_(?:TCP|UDP|SCTP)(?:(?P<proto>_PROTO)|(?P<port_of>_PORT)|(?P<addr>_ADDR)|(?P<url_of>)))$"
)
_LINK_URL = re.compile(r"^(?:tcp|udp|sctp)://(?P<ip>\[[0-9a-fA-F:.]+\]|[0-9.]+):\d{1,5}$")


def is_service_link(name: str, value: str) -> bool:
    """``name=value`` is a variable the kubelet injects for a Service named ``replicator``: one
    of its names, with a value of its shape (an address, a port, a protocol, a URL of them)."""
    match = _SERVICE_LINK.match(name)
    if match is None:
        return False
    kind = match.lastgroup
    if kind in ("host", "addr"):
        return _is_ip(value)
    if kind in ("port", "port_of"):
        return value.isdigit() and 0 < int(value) < 65536
    if kind == "proto":
        return value in ("tcp", "udp", "sctp")
    url = _LINK_URL.match(value)
    return url is not None and _is_ip(url["ip"].strip("[]"))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``REPLICATOR_*`` variables that name no setting: almost always a typo (Kubernetes'
    service link variables aside: :func:`is_service_link`)."""
    top = {name.upper() for name in Settings.model_fields}
    cluster_fields = {name.upper() for name in ClusterSettings.model_fields}
    flow_fields = {name.upper() for name in FlowSettings.model_fields}
    unknown = []
    for key in environ:
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or is_service_link(key, environ[key]):
            continue
        parts = upper[len(ENV_PREFIX) :].split(NESTED_DELIMITER)
        if parts[0] == "CLUSTERS":
            if len(parts) != 3 or parts[2] not in cluster_fields:
                unknown.append(key)
        elif parts[0] == "FLOWS":
            if len(parts) != 3 or parts[2] not in flow_fields:
                unknown.append(key)
        elif len(parts) != 1 or parts[0] not in top:
            unknown.append(key)
    return sorted(unknown)


_PASSWORD_FILE = re.compile(
    rf"^{ENV_PREFIX}CLUSTERS{NESTED_DELIMITER}[^_].*{NESTED_DELIMITER}SASL_PASSWORD_FILE$",
    re.IGNORECASE,
)


def _passwords_from_files(environ: Mapping[str, str]) -> dict[str, str]:
    """``..._SASL_PASSWORD`` read from each ``..._SASL_PASSWORD_FILE`` (a mounted secret), one
    trailing newline dropped; a file that cannot be read, is empty, or comes with the password
    set as well is refused, naming the variable (never the content)."""
    passwords = {}
    given = {name.upper() for name in environ}
    for name, path in environ.items():
        if not _PASSWORD_FILE.match(name):
            continue
        password_name = name[: -len("_FILE")]
        if not path.strip():
            raise ConfigError(name, "empty: give the path of the file holding the password")
        if password_name.upper() in given:
            raise ConfigError(name, f"{password_name.upper()} is set as well: keep one of the two")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(name, f"cannot read the password file {path}: {why}") from None
        password = text.removesuffix("\n").removesuffix("\r")
        if not password:
            raise ConfigError(name, f"the password file {path} is empty")
        passwords[password_name] = password
    return passwords


# Values never quoted in an error: secrets, and bootstrap servers (their validator shows the bad
# entries, credentials masked).
_UNQUOTED_FIELDS = {"sasl_password", "bootstrap_servers"}


def _unknown_setting(name: str) -> str:
    """Why ``name`` is refused, with the setting it most likely meant (a typo is the usual cause:
    ``REPLICATOR_PORT`` for ``REPLICATOR_HTTP_PORT``, ``..._LOG_LEVLE``)."""
    upper = name.upper()[len(ENV_PREFIX) :]
    head, _, field_name = upper.rpartition(NESTED_DELIMITER)
    if head.startswith(("CLUSTERS", "FLOWS")) and head.count(NESTED_DELIMITER) == 1:
        model = ClusterSettings if head.startswith("CLUSTERS") else FlowSettings
        fields = list(model.model_fields)
        prefix, wrong = f"{ENV_PREFIX}{head}{NESTED_DELIMITER}", field_name
    else:
        nested = {"clusters", "flows"}  # set as CLUSTERS__<ALIAS>__..., never alone
        fields = [f for f in Settings.model_fields if f not in nested]
        prefix, wrong = ENV_PREFIX, upper
    close = difflib.get_close_matches(wrong, [f.upper() for f in fields], n=1, cutoff=0.6)
    meant = f"; did you mean {prefix}{close[0]}?" if close else ""
    return f"unknown setting (check the spelling{meant})"


_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build and validate the settings from an environment (``os.environ`` by default)."""
    env = dict(os.environ if environ is None else environ)
    unknown = _unknown_variables(env)
    if unknown:
        raise ConfigError(unknown[0], _unknown_setting(unknown[0]))
    env.update(_passwords_from_files(env))
    values = _MappingEnvSource(Settings, env)()
    hostname = env.get("HOSTNAME", "").strip()
    # The platform's identity of this replica (a pod's or container's name): a container
    # restarted in the same pod keeps it. Not a variable of the product's, so not checked as
    # one: a name no group accepts leaves the replica a dynamic member.
    if "instance_id" not in values and _INSTANCE_ID.fullmatch(hostname):
        values["instance_id"] = hostname
    links = tuple(sorted(name for name, value in env.items() if is_service_link(name, value)))
    try:
        settings = Settings.from_values(values, links)
    except ValidationError as exc:
        raise _config_error(exc) from None
    # The replicator's own topics against the topic rules: topology's question, asked of the
    # model once it is built (clusters and flows known good).
    problem = internal_topic_problem(settings)
    if problem is not None:
        raise ConfigError(*problem)
    return settings


def _config_error(exc: ValidationError) -> ConfigError:
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, ConfigError):
        return inner
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing" and loc == ("clusters",):
        return ConfigError(
            f"{ENV_PREFIX}CLUSTERS__<ALIAS>__BOOTSTRAP_SERVERS",
            "no cluster is configured; define one block per datacenter",
        )
    if loc and str(loc[-1]) not in _UNQUOTED_FIELDS and err["type"] != "missing":
        # The value once: a validator that quotes it already is not followed by it again.
        shown = shown_value(exc.errors(include_url=False)[0].get("input"))
        if shown is not None and shown not in message:
            message = f"{message} (got {shown})"
    return ConfigError(env_name(loc) if loc else ENV_PREFIX + "*", message)
