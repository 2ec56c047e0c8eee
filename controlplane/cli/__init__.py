"""``guardian``, the operator's command line: :mod:`controlplane.cli.root` and one module per command group.

The console script is ``guardian = "controlplane.cli:main"``; ``python -m controlplane.cli`` runs the same.
``controlplane.cli.app`` is the same root with every group loaded (for ``CliRunner``); importing this package
loads nothing but the root, so ``guardian --help`` answers at once.
"""

from controlplane.cli.root import main

__all__ = ["main"]
