"""Throttle levers and the Kafka config names behind them, written once.

Lever kinds are the ``kind`` of a throttle in the replicated state; the config names are Kafka's
(KIP-73 replication throttles, KIP-113 intra-broker move rate) plus Guardian's partition-level
throttle extension keys. Every module that reads or writes these configs imports them from here.
"""

from __future__ import annotations

# lever kinds (the ``kind`` of a throttle in the replicated state)
PARTITION_FETCH = "partition_fetch"
PARTITION_PRODUCE = "partition_produce"
CONSUMER_QUOTA = "consumer_quota"
PRODUCER_QUOTA = "producer_quota"
FOLLOWER = "follower_replication"
MIGRATION = "migration_rate"
INTRA_BROKER = "intra_broker_rate"
LEVER_KINDS = (PARTITION_FETCH, PARTITION_PRODUCE, CONSUMER_QUOTA, PRODUCER_QUOTA, FOLLOWER, MIGRATION, INTRA_BROKER)

# KIP-73 replication throttles (broker rates, topic throttled-replica lists "partition:broker,...")
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# KIP-113 intra-broker (log dir to log dir) copy rate
ALTER_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
# Guardian's partition-level throttle extension ("partition:rate,..." topic configs; a broker flag marks support)
PT_FETCH = "guardian.partition.throttle.fetch.bytes.per.second"
PT_PRODUCE = "guardian.partition.throttle.produce.bytes.per.second"
PT_ENABLE = "guardian.partition.throttle.enable"

BROKER_THROTTLE_KEYS = (LEADER_RATE, FOLLOWER_RATE, ALTER_DIRS_RATE)
TOPIC_THROTTLE_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS, PT_PRODUCE, PT_FETCH)
CAPABILITY_KEYS = (PT_ENABLE,)
