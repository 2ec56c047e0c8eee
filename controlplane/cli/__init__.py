"""``guardian``, the operator's command line: :mod:`controlplane.cli.app` and one module per command group.

The console script is ``guardian = "controlplane.cli:main"``; ``python -m controlplane.cli`` runs the same.
"""

from controlplane.cli.app import app, main

__all__ = ["app", "main"]
