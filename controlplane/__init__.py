"""Guardian control plane: governs a federation of Kafka clusters."""

__version__ = "0.1.0"
