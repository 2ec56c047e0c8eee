"""Runs Yelp kafka-utils' balancers on an assignment read from a file; executed by kafka-utils' own interpreter.

``<kafka-utils venv>/bin/python benchmarks/kafka_utils_driver.py IN.json OUT.json``

Goal: kafka-utils' ``kafka-cluster-manager rebalance`` reads the brokers and the assignment from
ZooKeeper; this script feeds the same plain data to the classes that command drives
(``cmds/command.py`` builds a ``ClusterTopology`` from ``assignment``, ``brokers``, a
``PartitionMeasurer`` and a replication-group function, then ``cmds/rebalance.py`` calls the balancer's
``rebalance()`` and reads ``cluster_topology.assignment``), with no ZooKeeper.

Method: one ``ClusterTopology`` per pool in the input (kafka-utils has no pools: each is balanced as its
own cluster), replication group = the broker's rack (``None`` metadata for a dead broker, as ZooKeeper
would give), a measurer returning the input's per-partition weight and size. Balancer
``count`` = ``PartitionCountBalancer``, ``genetic`` = ``GeneticBalancer`` (its command-line defaults
unless ``balancer_args`` says otherwise), with ``--replication-groups --brokers --leaders``. The full
proposed assignment is written (what ``rebalance`` would converge to when run with no
``--max-partition-movements`` cap), before kafka-utils' own reduction to a few moves per run.

Guarantee: imports only kafka-utils and the standard library (it runs in an isolated venv whose
kafka-python 1.4.7 cannot coexist with Guardian's). Writes ``{"status": "ok", ...}`` or
``{"status": "error", "error": ...}``. Cost: whatever the balancer costs, reported as wall and CPU
seconds of the balancing alone (the JSON I/O excluded).

Input: ``{"balancer": "count"|"genetic", "balancer_args": [...], "max_partition_movements": int|null,
"pools": [{"pool": str, "brokers": [[id, rack, alive], ...], "partitions": [[topic, partition,
[replicas], weight, size], ...]}]}``. Output adds ``"assignment": [[topic, partition, [replicas]], ...]``
for every partition whose replica list (set or order) changed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any


def _balance(request: dict[str, Any]) -> dict[str, Any]:
    import kafka_utils
    from kafka_utils.kafka_cluster_manager.cluster_info.cluster_topology import ClusterTopology
    from kafka_utils.kafka_cluster_manager.cluster_info.genetic_balancer import GeneticBalancer
    from kafka_utils.kafka_cluster_manager.cluster_info.partition_count_balancer import PartitionCountBalancer
    from kafka_utils.kafka_cluster_manager.cluster_info.partition_measurer import PartitionMeasurer

    class TableMeasurer(PartitionMeasurer):
        """Weight and size per partition from the input table."""

        def __init__(self, table: dict[tuple[str, int], tuple[float, float]]) -> None:
            self.table = table

        def get_weight(self, partition_name: tuple[str, int]) -> float:
            return self.table[partition_name][0]

        def get_size(self, partition_name: tuple[str, int]) -> float:
            return self.table[partition_name][1]

    balancer_class = {"count": PartitionCountBalancer, "genetic": GeneticBalancer}[request["balancer"]]
    changed: list[list[Any]] = []
    wall = cpu = 0.0
    scores = []
    for pool in request["pools"]:
        racks = {int(b): rack for b, rack, _ in pool["brokers"]}
        brokers = {int(b): ({"host": f"broker-{b}", "rack": rack} if alive else None)
                   for b, rack, alive in pool["brokers"]}
        assignment = {(t, int(p)): [int(r) for r in replicas] for t, p, replicas, _, _ in pool["partitions"]}
        table = {(t, int(p)): (float(w), float(s)) for t, p, _, w, s in pool["partitions"]}
        args = argparse.Namespace(replication_groups=True, brokers=True, leaders=True,
                                  max_partition_movements=request.get("max_partition_movements"),
                                  max_movement_size=None, max_leader_changes=None,
                                  balancer_args=list(request.get("balancer_args", [])))
        t0, c0 = time.perf_counter(), time.process_time()
        topology = ClusterTopology(assignment, brokers, TableMeasurer(table),
                                   lambda broker, racks=racks: racks.get(broker.id, "unknown"))
        balancer = balancer_class(topology, args)
        before = balancer.score()
        balancer.rebalance()
        after = balancer.score()
        proposed = topology.assignment
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        scores.append({"pool": pool["pool"], "score_before": before, "score_after": after})
        for name, replicas in proposed.items():
            if list(replicas) != assignment[name]:
                changed.append([name[0], name[1], list(replicas)])
    return {"status": "ok", "version": kafka_utils.__version__, "seconds": wall, "cpu_seconds": cpu,
            "scores": scores, "assignment": changed}


def main(argv: list[str]) -> int:
    """Read the request, balance, write the answer; an exception becomes ``{"status": "error"}``."""
    source, target = argv
    with open(source) as f:
        request = json.load(f)
    try:
        answer = _balance(request)
    except BaseException as exc:  # every failure (incl. kafka-utils' sys.exit) is reported
        answer = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
    with open(target, "w") as f:
        json.dump(answer, f)
    return 0 if answer["status"] == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
