"""Kafka-agnostic replicated state machine on pysyncobj."""
