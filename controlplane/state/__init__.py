"""The replicated control-plane state: commands, the deterministic state machine, and its stores (local file, Raft)."""
