"""I/O adapters: Kafka admin (kafka-python) and ClickHouse (clickhouse-connect)."""
