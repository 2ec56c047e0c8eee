"""Metric sources (Kafka admin, Prometheus text) and the pure snapshot builder."""
