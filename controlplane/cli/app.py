"""``guardian``: the operator's command line, one module per command group. Every command has ``--help``.

Goal: the root Typer app with every group (``plan``, ``schema``, ``sim``, ``snapshot``, ``analytics``,
``throttle``, ``exec``, ``clusters``, ``topic``, ``lab``) and top-level command (``serve``, ``cluster``,
``token-hash``, ``migrate-idc``) mounted, for callers that drive the app in-process (tests' ``CliRunner``).
Method: :func:`controlplane.cli.root.eager_app` loads every entry of :data:`controlplane.cli.root.ENTRIES`;
the console script (:func:`main`) runs the same entries loaded on demand. The shared consoles, exit codes
and rejected-input reporting are in :mod:`controlplane.cli.common`.
Guarantee: exit codes 0 ok, 1 violations / failed, 2 invalid input, 3 refused snapshot, 130 detached.
Cost: importing every group's module (seconds); the console script does not.
"""

from __future__ import annotations

from controlplane.cli.root import eager_app, main

app = eager_app()

__all__ = ["app", "main"]
