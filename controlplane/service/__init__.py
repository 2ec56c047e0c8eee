"""Command handlers, the state machine applied by Raft, anomaly detection."""
