"""``python -m controlplane.cli``: the ``guardian`` command line (what the launcher and tests spawn)."""

from controlplane.cli.root import main

main()
