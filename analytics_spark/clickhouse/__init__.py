"""Everything Guardian keeps in ClickHouse: the client (embedded chdb or a server, one code path), the audit
record format and its exactly-once ingest, the 1-minute metric rollups, and the readers of finished model runs."""

from analytics_spark.clickhouse.client import ClickHouse, ClickHouseBusy, ClickHouseUnavailable, connect

__all__ = ["ClickHouse", "ClickHouseBusy", "ClickHouseUnavailable", "connect"]
