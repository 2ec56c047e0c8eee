"""Reconcile loop: desired state (Raft) versus actual state (Kafka), in small idempotent batches."""
