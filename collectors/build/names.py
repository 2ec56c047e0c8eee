"""The metric families the load model reads, and the codes of the bytes-in/out methods.

Goal: one place for every exposed name the builder depends on (so the scrape parser keeps exactly
these families: :data:`WANTED_METRICS`). Method: constants only. Guarantee: a family not named
here is never materialised by the collector's parser. Cost: none.
"""

from __future__ import annotations

# metric names read from broker payloads (the parser keeps only these): stock node_exporter names
# (diskstats, filesystem, meminfo collectors; device-mapper info from udev) and the names the
# jmx_exporter rules of deploy/jmx_exporter/kafka-broker.yml give a stock broker's MBeans
M_IO_TIME = "node_disk_io_time_seconds_total"
M_READ_B = "node_disk_read_bytes_total"
M_WRITE_B = "node_disk_written_bytes_total"
M_READS = "node_disk_reads_completed_total"
M_WRITES = "node_disk_writes_completed_total"
M_READ_T = "node_disk_read_time_seconds_total"
M_WRITE_T = "node_disk_write_time_seconds_total"
M_DM_INFO = "node_disk_device_mapper_info"
M_ROTATION = "node_disk_ata_rotation_rate_rpm"
M_FS_SIZE = "node_filesystem_size_bytes"
M_FS_AVAIL = "node_filesystem_avail_bytes"
M_MEM_TOTAL = "node_memory_MemTotal_bytes"
M_MEM_AVAIL = "node_memory_MemAvailable_bytes"
M_T_IN = "kafka_server_brokertopicmetrics_bytesin_total"
M_T_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
M_T_MSGS = "kafka_server_brokertopicmetrics_messagesin_total"
M_SIZE = "kafka_log_log_size"
M_LEO = "kafka_log_log_logendoffset"
M_LSO = "kafka_log_log_logstartoffset"
# optional: a kafka_exporter registered as an exporter URL (consumer positions come from Kafka's admin API)
M_GROUP_OFFSET = "kafka_consumergroup_current_offset"
M_GROUP_LAG = "kafka_consumergroup_lag"

BROKER_METRICS = frozenset({
    M_IO_TIME, M_READ_B, M_WRITE_B, M_READS, M_WRITES, M_READ_T, M_WRITE_T, M_DM_INFO, M_ROTATION, M_FS_SIZE,
    M_FS_AVAIL, M_MEM_TOTAL, M_MEM_AVAIL, M_T_IN, M_T_OUT, M_T_MSGS, M_SIZE, M_LEO, M_LSO,
})
"""What the collector reads from a broker's endpoints (stock jmx_exporter + node_exporter names)."""
JMX_METRICS = frozenset({M_T_IN, M_T_OUT, M_T_MSGS, M_SIZE, M_LEO, M_LSO})
"""The names of :data:`BROKER_METRICS` a JMX exporter gives (the rest are node_exporter's)."""
WANTED_METRICS = BROKER_METRICS | {M_GROUP_OFFSET, M_GROUP_LAG}

PLACEHOLDER_DIR = "unknown"
"""The log dir of a replica whose dir no listing has named yet."""

# how a partition's bytes-in / bytes-out figure was obtained (int8 codes in the round's arrays)
M_CODES = {"none": 0, "partition_counter": 1, "leo_x_topic_ratio": 2, "size_delta": 3, "held": 4, "topic_split": 5}
M_NAMES = {v: k for k, v in M_CODES.items()}
