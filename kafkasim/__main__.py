"""``python -m kafkasim up|fault ...``."""

from kafkasim.cli import main

main()
