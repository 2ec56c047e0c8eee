"""kafkasim: tiered topics (KIP-405): remote log manager, segments, remote store, RLM schedule, tiered metrics."""
