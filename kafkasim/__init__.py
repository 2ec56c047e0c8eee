"""Kafka-wire-compatible simulated federation for the demo, tests and benchmarks."""
