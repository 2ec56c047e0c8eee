"""The ClickHouse-SQL engine: the same models as the Spark jobs, computed inside ClickHouse (no JVM)."""
