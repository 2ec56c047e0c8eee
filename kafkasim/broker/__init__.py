"""kafkasim: the Kafka-facing side: listeners, wire framing, the APIs answered, groups, SASL/TLS security."""
