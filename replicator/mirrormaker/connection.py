"""One cluster's connection: its properties gathered from every client config, then resolved.

A cluster's connection properties (bootstrap servers, security protocol, SASL, TLS) may come from
several places: MirrorMaker 1's one file per cluster, or MirrorMaker 2's top-level, per-cluster
and per-client (``<alias>.consumer.``) properties, the more specific winning. :class:`Cluster`
gathers them as *offers* with a priority; :func:`cluster_env` resolves them once all are read
(a type may follow its location) into the ``REPLICATOR_CLUSTERS__<ALIAS>__*`` variables:
``host:port`` bootstrap servers, the security protocol, SASL PLAIN/SCRAM credentials from
``sasl.jaas.config`` (:func:`parse_jaas`) or ``sasl.username``/``sasl.password``, and PEM files.
Two clients of one cluster connecting differently, Kerberos, OAuth, JKS/PKCS12 stores, inline PEM
and encrypted keys are refused with what to do instead. Passwords are never quoted, nor are
credentials written into a bootstrap address (``user:secret@host:9092``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from replicator.config.values import is_host_port, shown_servers
from replicator.errors import ConfigError
from replicator.mirrormaker.translation import Builder, cluster_var
from replicator.mirrormaker.values import parse_bool

_VarFn = Callable[[str], str]


@dataclass
class Offer:
    priority: int
    value: str
    origin: str


@dataclass
class Cluster:
    """One cluster being translated: its connection properties, gathered from every place
    that may give them, resolved once all are read (a type may follow its location)."""

    alias: str
    label: str  # where its properties come from, for messages: a file name
    key_prefix: str = ""  # MM2: "<alias>."
    topic_alias: str | None = None
    alias_origin: str = ""
    offers: dict[str, list[Offer]] = field(default_factory=dict)
    start_from: Offer | None = None
    group_id: Offer | None = None

    def origin(self, key: str) -> str:
        return f"{self.key_prefix}{key} (in {self.label})"

    def offer(self, key: str, value: str, origin: str, priority: int) -> None:
        self.offers.setdefault(key, []).append(Offer(priority, value, origin))

    def get(self, *keys: str) -> Offer | None:
        """The highest-priority value of the first of ``keys`` given."""
        for key in keys:
            offers = self.offers.get(key)
            if not offers:
                continue
            top = max(o.priority for o in offers)
            best = [o for o in offers if o.priority == top]
            if len({o.value for o in best}) > 1:
                raise ConfigError(
                    best[1].origin,
                    f"differs from {best[0].origin}: the replicator connects to a cluster one "
                    "way for all its clients",
                )
            return best[0]
        return None

    def given(self, prefix: str) -> list[tuple[str, Offer]]:
        return [
            (key, offer)
            for key, offers in self.offers.items()
            if key.startswith(prefix)
            for offer in offers
        ]


CONNECTION_KEYS = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
    }
)


_JAAS_MODULE = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*)$", re.S)
_JAAS_OPTION = re.compile(
    r"""\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s;]+))"""
)
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# The SASL properties that say a cluster authenticates (not tuning such as sasl.login.*).
_SASL_KEYS = (
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
)


def parse_jaas(text: str, origin: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a ``sasl.jaas.config`` value (one module, as Kafka
    requires). Error messages never quote the value: it holds a password."""
    found = _JAAS_MODULE.match(text)
    if found is None:
        raise ConfigError(
            origin,
            'cannot be read: expected \'<LoginModule class> required username="..." '
            'password="...";\'',
        )
    module, rest = found.group(1), found.group(3)
    options: dict[str, str] = {}
    position = 0
    rest = rest.strip()
    while position < len(rest):
        if rest[position:].strip() in ("", ";"):
            break
        option = _JAAS_OPTION.match(rest, position)
        if option is None:
            raise ConfigError(origin, "cannot be read: expected name=\"value\" options and ';'")
        raw = next(g for g in option.group(2, 3, 4) if g is not None)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", raw)
        position = option.end()
    return module, options


def cluster_env(b: Builder, cluster: Cluster) -> list[str]:
    """The ``REPLICATOR_CLUSTERS__<ALIAS>__*`` variables of one cluster; its bootstrap servers."""

    def var(field_name: str) -> str:
        return cluster_var(cluster.alias, field_name)

    listed, servers_origin = _servers(cluster)
    b.set(var("BOOTSTRAP_SERVERS"), ",".join(listed), servers_origin)
    if cluster.topic_alias is not None:
        b.set(var("TOPIC_ALIAS"), cluster.topic_alias, cluster.alias_origin)
    protocol = _protocol(b, cluster, var)
    if protocol.startswith("SASL_"):
        _sasl_env(b, cluster, var)
    else:
        _sasl_unused(b, cluster, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        _ssl_env(b, cluster, var)
    else:
        for _key, offer in cluster.given("ssl.") + cluster.given("enable.ssl."):
            b.note(offer.origin, f"ignored: security.protocol is {protocol}, without TLS")
    return listed


def _servers(cluster: Cluster) -> tuple[list[str], str]:
    """A cluster's bootstrap servers, each a ``host:port``, and their origin."""
    servers = cluster.get("bootstrap.servers", "metadata.broker.list")
    if servers is None:
        raise ConfigError(
            cluster.origin("bootstrap.servers"), "required: host:port[,host:port...] of the brokers"
        )
    listed = [s.strip() for s in servers.value.split(",") if s.strip()]
    shown = shown_servers(listed)
    bad = [text for server, text in zip(listed, shown, strict=True) if not is_host_port(server)]
    if not listed or bad:
        got = ", ".join(bad) or "nothing"
        raise ConfigError(
            servers.origin,
            f"expected host:port[,host:port...]; {got} is not host:port{_servers_hint(listed)}",
        )
    return listed, servers.origin


def _servers_hint(listed: list[str]) -> str:
    """What is likely wrong with bootstrap servers that are not all ``host:port``."""
    if any("@" in s for s in listed):
        return (
            " (credentials never go into the address: give them in sasl.jaas.config or "
            "sasl.username and sasl.password)"
        )
    if any(":" not in s for s in listed if not is_host_port(s)):
        return " (a ':' missing before the port?)"
    return ""


def _protocol(b: Builder, cluster: Cluster, var: _VarFn) -> str:
    """The cluster's security.protocol (PLAINTEXT when absent), its variable set when given."""
    protocol_offer = cluster.get("security.protocol")
    protocol = protocol_offer.value.strip().upper() if protocol_offer else "PLAINTEXT"
    if protocol_offer is not None:
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(
                protocol_offer.origin,
                f"expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got {protocol!r}",
            )
        b.set(var("SECURITY_PROTOCOL"), protocol, protocol_offer.origin)
    return protocol


def _sasl_unused(b: Builder, cluster: Cluster, protocol: str) -> None:
    """SASL properties of a cluster whose security.protocol uses no SASL: noted, not refused.

    Kafka's clients ignore them, so MirrorMaker runs such a file (a file MirrorMaker runs must run
    unchanged here): the cluster is reached without authenticating, and the note says so and how
    to use them. The ``REPLICATOR_*`` variables, which no MirrorMaker file is translated into
    with such a mix, refuse it (:class:`~replicator.config.settings.Settings`)."""
    for key, offer in cluster.given("sasl."):
        consequence = (
            f": cluster {cluster.alias} is reached without authenticating (set "
            f"{cluster.key_prefix}security.protocol=SASL_SSL or SASL_PLAINTEXT to use them)"
            if key in _SASL_KEYS
            else ""
        )
        b.note(offer.origin, f"ignored: security.protocol is {protocol}, without SASL{consequence}")


def _sasl_env(b: Builder, cluster: Cluster, var: _VarFn) -> None:
    mechanism_offer = cluster.get("sasl.mechanism", "sasl.mechanisms")
    jaas_offer = cluster.get("sasl.jaas.config")
    module, options = _login_module(jaas_offer)
    mechanism, origin = _mechanism(b, cluster, mechanism_offer, module, jaas_offer)
    b.set(var("SASL_MECHANISM"), mechanism, origin)
    _credentials(b, cluster, var, jaas_offer, options)
    for _key, offer in cluster.given("sasl.kerberos.") + cluster.given("sasl.oauthbearer."):
        b.note(offer.origin, f"ignored: {mechanism} does not use it")


def _login_module(jaas_offer: Offer | None) -> tuple[str, dict[str, str]]:
    """The login module of ``sasl.jaas.config`` (PLAIN's or SCRAM's; ``""`` when absent) and
    its options."""
    if jaas_offer is None:
        return "", {}
    module, options = parse_jaas(jaas_offer.value, jaas_offer.origin)
    if module == _OAUTH_MODULE or module.endswith("Krb5LoginModule"):
        raise ConfigError(
            jaas_offer.origin,
            f"{module.rsplit('.', 1)[-1]} is not supported: the replicator authenticates with "
            "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
        )
    if module and module not in (_PLAIN_MODULE, _SCRAM_MODULE):
        raise ConfigError(
            jaas_offer.origin,
            f"login module {module} is not supported: use {_PLAIN_MODULE} or {_SCRAM_MODULE}",
        )
    return module, options


def _mechanism(
    b: Builder,
    cluster: Cluster,
    mechanism_offer: Offer | None,
    module: str,
    jaas_offer: Offer | None,
) -> tuple[str, str]:
    """The SASL mechanism and its origin: ``sasl.mechanism``, else PLAIN when the login module
    is PLAIN's (Kafka's GSSAPI default is refused)."""
    if mechanism_offer is not None:
        mechanism, origin = mechanism_offer.value.strip().upper(), mechanism_offer.origin
        if mechanism not in _SUPPORTED_MECHANISMS:
            raise ConfigError(
                origin,
                f"{mechanism} is not supported: the replicator authenticates with PLAIN, "
                "SCRAM-SHA-256 or SCRAM-SHA-512",
            )
        return mechanism, origin
    if module != _PLAIN_MODULE:
        raise ConfigError(
            cluster.origin("sasl.mechanism"),
            "absent, so Kafka's default GSSAPI (Kerberos) would be used, which is not "
            "supported here; give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
        )
    assert jaas_offer is not None
    b.note(
        cluster.origin("sasl.mechanism"),
        "absent (Kafka's default is GSSAPI): PLAIN, as the PlainLoginModule in "
        "sasl.jaas.config says",
    )
    return "PLAIN", jaas_offer.origin


def _credentials(
    b: Builder, cluster: Cluster, var: _VarFn, jaas_offer: Offer | None, options: dict[str, str]
) -> None:
    """The SASL username and password: the login module's, else ``sasl.username`` and
    ``sasl.password``."""
    username_offer = cluster.get("sasl.username")
    password_offer = cluster.get("sasl.password")
    if "username" in options and "password" in options:
        assert jaas_offer is not None
        b.set(var("SASL_USERNAME"), options["username"], jaas_offer.origin)
        b.set(var("SASL_PASSWORD"), options["password"], jaas_offer.origin)
        for offer in (username_offer, password_offer):
            if offer is not None:
                b.note(offer.origin, "ignored: sasl.jaas.config gives the credentials")
        unknown = sorted(set(options) - {"username", "password"})
        if unknown:
            b.note(jaas_offer.origin, f"ignored login module options: {', '.join(unknown)}")
    elif username_offer is not None and password_offer is not None and not options:
        b.set(var("SASL_USERNAME"), username_offer.value, username_offer.origin)
        b.set(var("SASL_PASSWORD"), password_offer.value, password_offer.origin)
    else:
        raise ConfigError(
            jaas_offer.origin if jaas_offer else cluster.origin("sasl.jaas.config"),
            "a SASL security.protocol needs a username and a password: "
            f'{_PLAIN_MODULE} required username="..." password="..."; '
            "(or ScramLoginModule), or sasl.username and sasl.password",
        )


def _ssl_env(b: Builder, cluster: Cluster, var: _VarFn) -> None:
    _refuse_inline_and_encrypted(cluster)
    _ca_file(b, cluster, var)
    _client_certificate(b, cluster, var)
    _ssl_notes(b, cluster)


def _refuse_inline_and_encrypted(cluster: Cluster) -> None:
    """Inline PEM and an encrypted private key are refused."""
    for inline in (
        "ssl.truststore.certificates",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
    ):
        offer = cluster.get(inline)
        if offer is not None:
            raise ConfigError(
                offer.origin,
                "inline PEM is not supported: write it to a file and give "
                "ssl.truststore.location / ssl.keystore.location with type PEM",
            )
    key_password = cluster.get("ssl.key.password")
    if key_password is not None and key_password.value:
        raise ConfigError(
            key_password.origin,
            "an encrypted private key cannot be used here: decrypt it "
            "(openssl pkey -in key.pem -out plain-key.pem) and drop ssl.key.password",
        )


def _store_type(cluster: Cluster, key: str) -> str:
    """A store's type, upper case (Kafka's default JKS when absent)."""
    kind = cluster.get(key)
    return kind.value.strip().upper() if kind else "JKS"


def _ca_file(b: Builder, cluster: Cluster, var: _VarFn) -> None:
    """SSL_CAFILE: a PEM truststore, else ``ssl.ca.location``."""
    truststore = cluster.get("ssl.truststore.location")
    ca = cluster.get("ssl.ca.location")
    if truststore is not None:
        kind_name = _store_type(cluster, "ssl.truststore.type")
        if kind_name != "PEM":
            raise ConfigError(
                truststore.origin,
                f"a {kind_name} truststore cannot be read here: convert it to PEM (keytool "
                "-exportcert -rfc -keystore <truststore> -alias <ca> -file ca.pem) and set "
                "ssl.truststore.type=PEM",
            )
        b.set(var("SSL_CAFILE"), truststore.value.strip(), truststore.origin)
        if ca is not None:
            b.note(ca.origin, "ignored: ssl.truststore.location gives the CA certificates")
    elif ca is not None:
        b.set(var("SSL_CAFILE"), ca.value.strip(), ca.origin)


def _client_certificate(b: Builder, cluster: Cluster, var: _VarFn) -> None:
    """SSL_CERTFILE and SSL_KEYFILE (mutual TLS): a PEM keystore, else
    ``ssl.certificate.location`` with ``ssl.key.location``."""
    keystore = cluster.get("ssl.keystore.location")
    certificate = cluster.get("ssl.certificate.location")
    key = cluster.get("ssl.key.location")
    if keystore is not None:
        kind_name = _store_type(cluster, "ssl.keystore.type")
        if kind_name != "PEM":
            raise ConfigError(
                keystore.origin,
                f"a {kind_name} keystore cannot be read here: convert it to one PEM file holding "
                "the certificate and its unencrypted key (openssl pkcs12 -in <keystore.p12> "
                "-nodes -out client.pem) and set ssl.keystore.type=PEM",
            )
        b.set(var("SSL_CERTFILE"), keystore.value.strip(), keystore.origin)
        b.set(var("SSL_KEYFILE"), keystore.value.strip(), keystore.origin)
    elif certificate is not None or key is not None:
        if certificate is None or key is None:
            given = certificate or key
            assert given is not None
            missing = "ssl.key.location" if certificate is not None else "ssl.certificate.location"
            raise ConfigError(given.origin, f"needs {missing} too (mutual TLS needs both)")
        b.set(var("SSL_CERTFILE"), certificate.value.strip(), certificate.origin)
        b.set(var("SSL_KEYFILE"), key.value.strip(), key.origin)


def _ssl_notes(b: Builder, cluster: Cluster) -> None:
    """The TLS properties accepted with a note: store passwords, verification turned off."""
    for name in ("ssl.truststore.password", "ssl.keystore.password"):
        offer = cluster.get(name)
        if offer is not None:
            b.note(offer.origin, "not needed: PEM files are read without a store password")
    identification = cluster.get("ssl.endpoint.identification.algorithm")
    if identification is not None and not identification.value.strip():
        b.note(
            identification.origin,
            "empty (host name verification off): the replicator always verifies the broker's "
            "host name against its certificate",
        )
    verification = cluster.get("enable.ssl.certificate.verification")
    if verification is not None and parse_bool(verification.value) is False:
        b.note(verification.origin, "the replicator always verifies the broker's certificate")
