"""Guardian control plane: governs a federation of Kafka clusters.

``__version__`` is the one place the version is written: pyproject.toml reads it (``dynamic``), and
``guardian --version``, the API (``/api/v1/version``, OpenAPI), the ``guardian_build_info`` metric and the
start-up log line report it.
"""

__version__ = "0.1.0"
DISTRIBUTION = "kafka-guardian"
"""The distribution's name on PyPI (``pip install kafka-guardian``; the command is ``guardian``)."""
