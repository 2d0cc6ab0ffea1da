"""The command line (``replicator``, typer): what an operator types.

``commands``
    Every command: ``run`` (the service), ``mirror-maker`` and ``mm2`` (the service, configured
    by MirrorMaker's options or properties file), ``demo``, ``sandbox``, the operator commands and
    the Spark jobs; invalid configuration exits 2 naming the variable.
``operations``
    The operator commands' work: ``check-config``, ``lag``, ``topics ensure``.

The console script ``replicator`` and ``python -m replicator`` call :func:`main`.
"""

from replicator.cli.commands import app, main

__all__ = ["app", "main"]
