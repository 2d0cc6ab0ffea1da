"""The HTTP surface: ``/livez``, ``/readyz``, ``/status`` and ``/metrics``.

- ``/livez``: 200 while the event loop and every connected leg's fetch loop make progress.
- ``/readyz``: 200 when configuration is valid, every cluster answers, every leg has joined its
  group and every assigned partition has started and is neither halted nor stalled; otherwise
  503 with the failing checks, at most one line per leg and condition however many partitions
  it holds (``leg dc1->dc2: 37 of 1200 partitions starting (orders_REPLICA[3] and 29 more:
  destination not ready: ...)``). ``/readyz?scope=local`` judges the local cluster and the
  local leg only (for orchestrators: a remote outage must not hold a rolling update).
- ``/status``: JSON: clusters, topics, the source feed, flows and, per leg, a summary of a size
  independent of its partitions: ``assigned_partitions``, ``partition_states`` (counts of
  ``starting``, ``replicating``, ``stalled``, ``halted``), ``detached_partitions``,
  ``starting_reasons`` and ``halted_reasons`` (the most common ``last_error`` values, each with a
  count and an example partition), ``longest_unacknowledged_seconds``, ``lag`` (``records`` in
  total, ``partitions_unknown``, ``max_partition``, the most lagging ``topics``), ``duplicates``,
  ``refused_topics``, ``partitions_added``, ``topic_config_sync``, ``offset_resets``, ``takeover``
  (with ``TAKE_OVER``: the MirrorMaker taken over from, the partitions by the evidence they started
  on, counted and named by topic in ``which``: ``confirmed_by_the_target``,
  ``at_its_saved_position``, ``by_start_from``) and ``last_error``. Per-partition detail on request:
  ``partitions=all``, ``topic=orders`` (a source or destination topic), ``state=starting``
  (``starting``, ``replicating``, ``stalled``, ``halted``, or a partition's own state: ``attached``,
  ``fetching_alone``, ``replaying``, ``blocked``, ``failed``), repeated or comma-separated, and
  ``limit`` (default 1000 per leg) add to each leg ``partitions`` (state, offsets, log end, lag,
  last error; in topic and partition order), ``partitions_matched`` and ``partitions_truncated``
  (matched but not listed); ``partition_detail`` echoes the query. An unknown parameter or value is
  answered 400. ``acl_sync`` (with an ACL sync policy): per sync ``source->target``, its
  rounds, failures and last error, the bindings copied, owned, created and removed, and those
  left out or changed with their reasons. No secrets.
- ``/metrics``: Prometheus exposition (labels per leg, topic or state, never per partition).

An address the server cannot listen on (port taken, host not on this machine) is configuration
error: :meth:`HttpServer.start` raises :class:`~replicator.errors.ConfigError` naming the variable,
and :func:`listen_problem` (``check-config``) finds the same before the service starts.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from replicator.config.values import ENV_PREFIX
from replicator.errors import ConfigError
from replicator.replication.health import PartitionQuery


class Observable(Protocol):
    """What the HTTP surface needs from the service."""

    def liveness_problems(self) -> list[str]: ...

    def readiness_problems(self, local_only: bool = False) -> list[str]: ...

    def status(self, detail: PartitionQuery | None = None) -> dict[str, Any]: ...

    def metrics_exposition(self) -> bytes: ...


def build_app(service: Observable) -> web.Application:
    async def livez(_: web.Request) -> web.Response:
        problems = service.liveness_problems()
        return web.json_response(
            {"live": not problems, "problems": problems}, status=503 if problems else 200
        )

    async def readyz(request: web.Request) -> web.Response:
        scope = request.query.get("scope", "all")
        if scope not in ("all", "local"):
            return web.json_response({"error": "scope must be all or local"}, status=400)
        problems = service.readiness_problems(local_only=scope == "local")
        return web.json_response(
            {"ready": not problems, "problems": problems}, status=503 if problems else 200
        )

    async def status(request: web.Request) -> web.Response:
        try:
            detail = PartitionQuery.parse(request.query.items())
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(service.status(detail))

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=service.metrics_exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    return app


class HttpServer:
    """Serves the health app on the configured address until stopped."""

    def __init__(self, service: Observable, host: str, port: int) -> None:
        self._runner = web.AppRunner(build_app(service), access_log=None)
        self._host = host
        self._port = port
        self.port = port

    async def start(self) -> None:
        """Listen on the configured address; :class:`ConfigError` if it cannot be bound."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise bind_error(self._host, self._port, exc) from None
        addresses = self._runner.addresses  # the bound sockets (port 0: the one chosen)
        if addresses:
            self.port = int(addresses[0][1])

    async def stop(self) -> None:
        await self._runner.cleanup()


def _plain_bind_error(host: str, port: int) -> OSError | None:
    """What binding one plain socket to ``host:port`` raises (with its errno), if anything."""
    try:
        socket.create_server((host, port)).close()
    except OSError as exc:
        return exc
    return None


def bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    """Why the server cannot listen on ``host:port``, naming the variable to change."""
    where = f"{host}:{port}"
    if not isinstance(exc, socket.gaierror) and not exc.errno:
        # Python 3.13's asyncio reports a failed bind without its errno ("could not bind on
        # any address out of ..."): a plain socket says which error it was.
        exc = _plain_bind_error(host, port) or exc
    if isinstance(exc, socket.gaierror) or not exc.errno:
        reason = exc.strerror or type(exc).__name__
    else:
        reason = os.strerror(exc.errno)
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(
            f"{ENV_PREFIX}HTTP_HOST",
            f"cannot listen on {where}: {reason} (not an address of this machine; "
            "0.0.0.0 listens on all of them)",
        )
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            f"{ENV_PREFIX}HTTP_PORT",
            f"cannot listen on {where}: the port is already in use (another replicator "
            "on this host? give each its own REPLICATOR_HTTP_PORT)",
        )
    return ConfigError(f"{ENV_PREFIX}HTTP_PORT", f"cannot listen on {where}: {reason}")


def listen_problem(host: str, port: int) -> ConfigError | None:
    """Why the server could not listen on ``host:port`` now, or ``None``: a server is bound
    there as :meth:`HttpServer.start` binds it (same options), and closed at once."""

    async def attempt() -> None:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, host, port)
        server.close()
        await server.wait_closed()

    try:
        asyncio.run(attempt())
    except OSError as exc:
        return bind_error(host, port, exc)
    return None
