"""Apache Kafka itself on loopback, from Maven Central's jars: the brokers the suite and the
benchmarks prove the product on, and ``replicator sandbox --broker kafka``.

Owns the pinned release and its jars (copied through :mod:`replicator.devtools.jvm`), the broker's
configuration (KRaft combined mode: every node is broker and controller), and the JVM processes:
one node per datacenter by default, three for leader failover. Listeners beyond PLAINTEXT (SSL,
SASL_SSL, SASL_PLAINTEXT) with a test certificate authority, SCRAM users and the standard
authorizer are switched on per cluster; ACLs are granted with Kafka's own AclCommand, or many
at once in one request (:func:`change_acls`). Each node keeps its data on disk, so a restart
keeps the log; its output goes to a file that :meth:`ApacheKafkaCluster.log` shows. A node's
JVM dies with the process that started it, so no broker outlives a killed test run.

Nothing here is used by ``replicator run``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from replicator.devtools.embedded import LocalBroker, embedded_clusters, free_port
from replicator.devtools.jvm import (
    cache_root,
    copy_jars,
    die_with_parent,
    ensure_dir,
    java,
    log4j2_config,
    spawn_jvm,
)
from replicator.errors import LocalKafkaError
from replicator.kafka.admin import AclBinding, create_acls, delete_acls

BROKERS = ("kafka", "embedded")
"""The local brokers a tool may start: Apache Kafka (the product's target) or the embedded one."""

KAFKA_VERSION = "4.3.1"
"""The pinned release: the newest whose every module the harness needs (broker, tools,
``connect-mirror`` and ``connect-mirror-client``) resolves from Maven Central (4.2.1 and 4.4.0
lack ``connect-mirror-client`` there)."""

POM = Path(__file__).parent / "maven" / "kafka.pom.xml"
_READY = "Kafka Server started (kafka.server.KafkaRaftServer)"


OTHER_KAFKA_VERSIONS = ("4.0.2", "4.4.0")
"""Broker releases beside :data:`KAFKA_VERSION` in the supported matrix (the oldest 4.0 and the
newest release), tested by ``tests/integration/test_kafka_versions.py``."""


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory holding Apache Kafka's jars, fetched through Maven the first time (offline
    from ``~/.m2`` when it can, else from Maven Central): broker, tools and MirrorMaker 2 for
    :data:`KAFKA_VERSION`, broker and tools alone for another release."""
    if version == KAFKA_VERSION:
        libs = cache_root() / f"kafka-{version}" / "libs"
        return copy_jars(POM, libs, {"kafka.version": version})
    libs = cache_root() / f"kafka-{version}-broker" / "libs"
    return copy_jars(POM, libs, {"kafka.version": version, "brokerOnly": "true"})


def new_cluster_id() -> str:
    """22 URL-safe base64 characters of a random UUID, never starting with ``-``."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class ScramUser:
    name: str
    password: str
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class Security:
    """What a cluster's listeners beyond PLAINTEXT ask of clients.

    ``pki`` is a directory holding ``ca.pem`` and ``broker.pem`` (PKCS#8 key, leaf, CA) made by
    ``write_pki`` in ``tests/integration/pki.py``; ``users`` are SCRAM users created at format
    time; ``acls`` switches on the standard authorizer with ``super_users`` allowed everything (the
    broker's own PLAINTEXT listener stays open for the harness, as ``User:ANONYMOUS``).
    """

    pki: Path | None = None
    mutual_tls: bool = False
    users: tuple[ScramUser, ...] = ()
    sasl_plaintext: bool = False
    acls: bool = False
    super_users: tuple[str, ...] = ("User:ANONYMOUS",)


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    ssl_port: int | None = None
    sasl_ssl_port: int | None = None
    sasl_plaintext_port: int | None = None
    wan_port: int | None = None  # the WAN listener's own port (clients are told the relay's)
    process: subprocess.Popen[bytes] | None = None
    log_offset: int = 0  # where this start's output begins in the log

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class ApacheKafkaCluster:
    """One Apache Kafka cluster (one datacenter): ``nodes`` combined broker-controller JVMs."""

    alias: str
    nodes_count: int = 1
    security: Security = field(default_factory=Security)
    overrides: dict[str, str] = field(default_factory=dict)
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="apache-kafka-")))
    cluster_id: str = field(default_factory=new_cluster_id)
    nodes: list[Node] = field(default_factory=list)
    heap_mb: int = 0
    # Clients are told to connect here (a proxy in front of a single node, say); default: port.
    advertised_port: int | None = None
    # The JIT's first tier only (-XX:TieredStopAtLevel=1): each node starts about a third
    # faster and spends no core on optimising compiles, for the short-lived clusters of the
    # tests; the benchmarks keep the full JIT, which is faster under sustained load.
    quick_start: bool = False
    # A second PLAINTEXT listener, named WAN, advertised at this port: a relay's in front of it
    # (:mod:`replicator.devtools.wan`), for clients that reach the cluster across a long link.
    wan_port: int | None = None
    version: str = KAFKA_VERSION  # the broker release (another: OTHER_KAFKA_VERSIONS)

    def __post_init__(self) -> None:
        if self.wan_port and self.nodes_count > 1:
            raise LocalKafkaError("a WAN listener is for a single-node cluster")
        self._choose_ports()
        if not self.heap_mb:
            self.heap_mb = 512 if self.nodes_count == 1 else 384

    def _choose_ports(self) -> None:
        """Free ports for every node (bind-tested: another process may still take one before
        the node binds it, see :func:`start_all`)."""
        pki = self.security.pki
        self.nodes.clear()
        for node_id in range(1, self.nodes_count + 1):
            self.nodes.append(
                Node(
                    node_id,
                    free_port(),
                    free_port(),
                    self.directory / f"node-{node_id}",
                    ssl_port=free_port() if pki else None,
                    sasl_ssl_port=free_port() if pki and self.security.users else None,
                    sasl_plaintext_port=free_port() if self.security.sasl_plaintext else None,
                    wan_port=free_port() if self.wan_port else None,
                )
            )

    def port_taken(self) -> bool:
        """Whether a node of this start exited because one of its ports was taken meanwhile."""
        for node in self.nodes:
            if node.running or not node.log_path.exists():
                continue
            with node.log_path.open("rb") as log:
                log.seek(node.log_offset)
                if b"Address already in use" in log.read():
                    return True
        return False

    def new_ports(self) -> None:
        """Before a first start only (a restart keeps its ports): every node's data and
        configuration dropped, new ports chosen."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self._choose_ports()

    # -- addresses ----------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """The PLAINTEXT listener of every node (as advertised: the proxy's, if one fronts it)."""
        if self.advertised_port:
            return f"127.0.0.1:{self.advertised_port}"
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def port(self) -> int:
        """The first node's PLAINTEXT port."""
        return self.nodes[0].port

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The first node's JVM (a single-node cluster's only one), ``None`` when stopped."""
        return self.nodes[0].process if self.nodes[0].running else None

    def listener(self, name: str) -> str:
        """Bootstrap servers of the ``SSL``, ``SASL_SSL`` or ``SASL_PLAINTEXT`` listener, or of the
        ``WAN`` one (the relay's port)."""
        if name == "WAN":
            if not self.wan_port:
                raise LocalKafkaError(f"cluster {self.alias} has no WAN listener")
            return f"127.0.0.1:{self.wan_port}"
        attribute = {
            "PLAINTEXT": "port",
            "SSL": "ssl_port",
            "SASL_SSL": "sasl_ssl_port",
            "SASL_PLAINTEXT": "sasl_plaintext_port",
        }[name]
        ports = [getattr(n, attribute) for n in self.nodes]
        if None in ports:
            raise LocalKafkaError(f"cluster {self.alias} has no {name} listener")
        return ",".join(f"127.0.0.1:{p}" for p in ports)

    # -- configuration ------------------------------------------------------------------------

    def _listeners(self, node: Node) -> tuple[str, str]:
        """A node's listeners as bound (its own ports) and as advertised (the proxy's port for
        PLAINTEXT, the relay's for WAN)."""
        given = {
            "PLAINTEXT": node.port,
            "SSL": node.ssl_port,
            "SASL_SSL": node.sasl_ssl_port,
            "SASL_PLAINTEXT": node.sasl_plaintext_port,
            "WAN": node.wan_port,
        }
        listeners = {name: port for name, port in given.items() if port}
        bound = ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items())
        if self.advertised_port and self.nodes_count <= 1:
            listeners["PLAINTEXT"] = self.advertised_port
        if self.wan_port:
            listeners["WAN"] = self.wan_port
        advertised = ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items())
        return bound, advertised

    def _security_properties(self) -> dict[str, str]:
        """The brokers' TLS, SCRAM and ACL properties, as :attr:`security` asks."""
        security = self.security
        properties: dict[str, str] = {}
        if security.pki:
            properties |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(security.pki / "broker.pem"),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(security.pki / "ca.pem"),
            }
            if security.mutual_tls:
                properties["listener.name.ssl.ssl.client.auth"] = "required"
        if security.users:
            properties["sasl.enabled.mechanisms"] = "SCRAM-SHA-256,SCRAM-SHA-512"
            for listener in ("sasl_ssl", "sasl_plaintext"):
                for mechanism in ("scram-sha-256", "scram-sha-512"):
                    properties[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    )
        if security.acls:
            properties |= {
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": ";".join(security.super_users),
                "allow.everyone.if.no.acl.found": "false",
            }
        return properties

    def properties(self, node: Node) -> dict[str, str]:
        many = self.nodes_count > 1
        replicas = "3" if many else "1"
        min_isr = "2" if many else "1"
        bound, advertised = self._listeners(node)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        properties = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": f"{bound},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": advertised,
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,WAN:PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "auto.create.topics.enable": "false",
            "log.cleaner.dedupe.buffer.size": "2097152",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
            "group.coordinator.threads": "1",
            "delete.topic.enable": "true",
        }
        if many:
            properties |= {
                "broker.session.timeout.ms": "4000",
                "broker.heartbeat.interval.ms": "1000",
                "replica.lag.time.max.ms": "5000",
            }
        properties |= self._security_properties()
        return properties | self.overrides

    def format_storage(self, node: Node, libs: Path) -> None:
        config = node.directory / "server.properties"
        scram = [
            arg
            for user in self.security.users
            for mechanism in user.mechanisms
            for arg in ("--add-scram", f"{mechanism}=[name={user.name},password={user.password}]")
        ]
        formatting = subprocess.run(
            [
                java(),
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
                f"-Dlog4j2.configurationFile={log4j2_config(node.directory, 'WARN')}",
                "-cp",
                f"{libs}/*",
                "kafka.tools.StorageTool",
                "format",
                "--config",
                str(config),
                "--cluster-id",
                self.cluster_id,
                *scram,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if formatting.returncode != 0:
            raise LocalKafkaError(
                f"formatting {self.alias} node {node.node_id} failed:\n"
                f"{formatting.stdout}{formatting.stderr}"
            )

    # -- processes ----------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> ApacheKafkaCluster:
        """Format every node (the first time), start them all, wait until each serves. A
        stopped cluster starts again on its own ports and data."""
        start_all([self], timeout)
        return self

    def prepare(self, node: Node, libs: Path) -> None:
        """Write the node's configuration and format its storage, once."""
        if (node.directory / "data" / "meta.properties").exists():
            return
        ensure_dir(node.directory)
        (node.directory / "server.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in self.properties(node).items())
        )
        self.format_storage(node, libs)

    def spawn(self, node: Node, libs: Path) -> None:
        if node.running:
            return
        node.log_path.touch()
        node.log_offset = node.log_path.stat().st_size
        log4j2_config(node.directory)
        node.process = spawn_jvm(
            [
                *(["-XX:TieredStopAtLevel=1"] if self.quick_start else []),
                f"-Dkafka.logs.dir={node.directory / 'logs'}",
                f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                "-cp",
                f"{libs}/*",
                "kafka.Kafka",
                str(node.directory / "server.properties"),
            ],
            node.log_path,
            node.directory / "tmp",
            self.heap_mb,
        )

    def wait_ready(self, node: Node, timeout: float) -> None:
        """Wait for this start's readiness line (only output written since the start)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with node.log_path.open("rb") as log:
                log.seek(node.log_offset)
                if _READY.encode() in log.read():
                    return
            if not node.running:
                raise LocalKafkaError(
                    f"{self.alias} node {node.node_id} exited before serving:\n{self.log(node)}"
                )
            time.sleep(0.1)
        raise LocalKafkaError(
            f"{self.alias} node {node.node_id} not serving after {timeout}s:\n{self.log(node)}"
        )

    def stop_node(self, node: Node, timeout: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL after ``timeout``; waits for the exit."""
        if node.process is None:
            return
        if node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGTERM)
            try:
                node.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill_node(node)
        node.process = None

    def kill_node(self, node: Node) -> None:
        """SIGKILL: the node dies as in a power cut (its log on disk stays)."""
        if node.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait()
            node.process = None

    def start_node(self, node: Node, timeout: float = 120.0) -> None:
        """Start a stopped node again on its own ports and data (it rejoins the cluster)."""
        self.spawn(node, kafka_libs(self.version))
        self.wait_ready(node, timeout)

    def restart(self, timeout: float = 120.0) -> None:
        """Stop every node, then start them again: the data stays."""
        self.stop()
        self.start(timeout)

    def restart_empty(self, timeout: float = 120.0) -> None:
        """Stop, lose every node's data (a lost volume, a cluster rebuilt under the same
        addresses: a new cluster id), and start again on the same ports."""
        self.stop()
        for node in self.nodes:
            shutil.rmtree(node.directory / "data", ignore_errors=True)
        self.cluster_id = new_cluster_id()
        self.start(timeout)

    def stop(self) -> None:
        """A controlled shutdown of every node; the data stays for a later :meth:`start`."""
        for node in self.nodes:
            self.stop_node(node)

    def kill(self) -> None:
        """SIGKILL every node (the data on disk stays)."""
        for node in self.nodes:
            self.kill_node(node)

    def remove(self) -> None:
        """Stop, then delete the data directories."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log(self, node: Node | None = None, tail: int = 6000) -> str:
        """The tail of one node's output (every node's without ``node``)."""
        parts = []
        for each in [node] if node else self.nodes:
            text = each.log_path.read_text(errors="replace") if each.log_path.exists() else ""
            parts.append(f"--- {self.alias} node {each.node_id} ---\n{text[-tail:]}")
        return "\n".join(parts)


_PORT_ATTEMPTS = 3


def start_all(clusters: list[ApacheKafkaCluster], timeout: float = 120.0) -> None:
    """Start several clusters at once (their JVMs warm up in parallel); on a failure, stop
    every one of them and raise with the failing node's log. A cluster never started before
    whose port another process took between its choice and the bind (two test workers, a
    MirrorMaker) is started again on new ports."""
    fresh = {id(c) for c in clusters if not any(n.log_path.exists() for n in c.nodes)}
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        try:
            _start_all(clusters, timeout)
            return
        except LocalKafkaError:
            taken = [c for c in clusters if id(c) in fresh and c.port_taken()]
            if not taken or attempt == _PORT_ATTEMPTS:
                raise
            for cluster in taken:
                cluster.new_ports()


def _start_all(clusters: list[ApacheKafkaCluster], timeout: float) -> None:
    libs = {version: kafka_libs(version) for version in {c.version for c in clusters}}
    try:
        for cluster in clusters:
            for node in cluster.nodes:
                cluster.prepare(node, libs[cluster.version])
        for cluster in clusters:
            for node in cluster.nodes:
                cluster.spawn(node, libs[cluster.version])
        for cluster in clusters:
            for node in cluster.nodes:
                cluster.wait_ready(node, timeout)
    except BaseException:
        for cluster in clusters:
            cluster.stop()
        raise


def kafka_tool(main_class: str, *args: str, timeout: float = 120.0) -> str:
    """Run one of Apache Kafka's command-line tools (``org.apache.kafka.tools.AclCommand``...)
    as a short JVM; its output, or :class:`LocalKafkaError` with it when it fails."""
    libs = kafka_libs()
    with tempfile.TemporaryDirectory(prefix="kafka-tool-") as scratch:
        done = subprocess.run(
            [
                java(),
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
                f"-Djava.io.tmpdir={scratch}",
                f"-Dlog4j2.configurationFile={log4j2_config(Path(scratch), 'WARN')}",
                "-cp",
                f"{libs}/*",
                main_class,
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            preexec_fn=die_with_parent,
        )
    if done.returncode != 0:
        raise LocalKafkaError(
            f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} failed ({done.returncode}):\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done.stdout


# The scripts of Apache Kafka's distribution (its ``bin/``) and the tool each one starts: the
# jars on Maven Central carry the tools, not the scripts.
TOOL_SCRIPTS = {
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-configs.sh": "kafka.admin.ConfigCommand",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
}


def tool_scripts(directory: Path, version: str = KAFKA_VERSION) -> Path:
    """Write launchers named as the distribution's scripts (``kafka-consumer-groups.sh``...)
    into ``directory``, each starting that release's tool from its jars with the arguments it is
    given: put ``directory`` on the PATH to run a page's Kafka commands as written."""
    libs = kafka_libs(version)
    log4j = log4j2_config(ensure_dir(directory), "WARN")
    for name, main_class in TOOL_SCRIPTS.items():
        script = directory / name
        script.write_text(
            "#!/bin/sh\n"
            f"exec '{java()}' -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
            f"-XX:-UsePerfData -Dlog4j2.configurationFile='{log4j}' -cp '{libs}/*' "
            f'{main_class} "$@"\n'
        )
        script.chmod(0o755)
    return directory


def grant(
    cluster: ApacheKafkaCluster,
    principal: str,
    *resource: str,
    operations: str,
    allow: bool = True,
) -> None:
    """Add ACLs with Kafka's own AclCommand: ``principal`` (``User:alice``) is allowed (denied,
    with ``allow=False``) each of ``operations`` (comma-separated) on ``resource`` (``--topic
    orders``, ``--group x --resource-pattern-type prefixed``, ``--cluster``), through the
    PLAINTEXT listener."""
    _acl_command(cluster, "--add", principal, resource, operations, allow)


def revoke(cluster: ApacheKafkaCluster, principal: str, *resource: str, operations: str) -> None:
    """Remove ACLs :func:`grant` added (the same arguments), with Kafka's own AclCommand."""
    _acl_command(cluster, "--remove", principal, resource, operations, allow=True)


def _acl_command(
    cluster: ApacheKafkaCluster,
    action: str,
    principal: str,
    resource: tuple[str, ...],
    operations: str,
    allow: bool,
) -> None:
    kafka_tool(
        "org.apache.kafka.tools.AclCommand",
        "--bootstrap-server",
        ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes),
        action,
        "--allow-principal" if allow else "--deny-principal",
        principal,
        *[arg for operation in operations.split(",") for arg in ("--operation", operation)],
        *resource,
        "--force",
    )


def change_acls(
    cluster: ApacheKafkaCluster,
    *,
    add: Sequence[AclBinding] = (),
    remove: Sequence[AclBinding] = (),
) -> None:
    """Remove then add ACLs through the PLAINTEXT listener, each change one request
    (DeleteAcls, CreateAcls) however many it carries: where a test changes many grants, a
    JVM per :func:`grant` is seconds each."""

    async def send() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            await delete_acls(admin, remove)
            await create_acls(admin, add)
        finally:
            await admin.close()

    asyncio.run(send())


# A cluster of several nodes whose partitions are spread over them, one copy each (the nodes'
# own default is three copies, for the tests that stop a node).
SHARED_NOT_COPIED = {
    name: "1"
    for name in (
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    )
}


@contextlib.contextmanager
def local_clusters(
    *aliases: str,
    broker: str = "kafka",
    heap_mb: int = 0,
    wan: bool = False,
    storage: Path | None = None,
    nodes: int = 1,
) -> Iterator[dict[str, LocalBroker]]:
    """One cluster per alias, started together: Apache Kafka (``broker="kafka"``, ``nodes``
    JVMs each with ``heap_mb`` of heap, the default if 0; with ``wan``, each with a WAN listener
    on a port of its own for a relay to serve; its directory, logs included, under ``storage``
    if given, else the temporary directory) or the embedded broker (``"embedded"``, in memory,
    one node); stopped, their data deleted, on exit.

    Several ``nodes`` share the partitions rather than copy them (replication factor 1): they
    are for more partitions than one JVM may hold files open for, not for failures."""
    if broker not in BROKERS:
        raise LocalKafkaError(f"no local broker {broker!r}: one of {', '.join(BROKERS)}")
    if wan and broker != "kafka":
        raise LocalKafkaError("a WAN listener needs Apache Kafka (--broker kafka)")
    if nodes > 1 and broker != "kafka":
        raise LocalKafkaError("several nodes per cluster need Apache Kafka (--broker kafka)")
    if broker == "embedded":
        with embedded_clusters(*aliases) as brokers:
            yield dict(brokers)
        return
    clusters = {
        alias: ApacheKafkaCluster(
            alias,
            nodes_count=nodes,
            overrides=SHARED_NOT_COPIED if nodes > 1 else {},
            heap_mb=heap_mb,
            wan_port=free_port() if wan else None,
            directory=Path(tempfile.mkdtemp(prefix="apache-kafka-", dir=storage)),
        )
        for alias in aliases
    }
    try:
        start_all(list(clusters.values()))
        yield dict(clusters)
    finally:
        for cluster in clusters.values():
            cluster.remove()


if __name__ == "__main__":  # ``python -m replicator.devtools.apache_kafka``: fetch the jars
    print(kafka_libs())
