"""The one edge to Kafka: admin reads and writes through kafka-python, the endpoints file, bulk metadata reads."""
