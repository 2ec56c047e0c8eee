"""Guardian's own Prometheus metrics (one registry per service instance, so tests stay isolated).

The controller's own health lives in the registry; the federation's figures (snapshots, disks, pools,
executions, throttles) are rendered beside it by :class:`~controlplane.service.metrics_figures.FederationFigures`
from figures cached per cluster, so a scrape never walks a snapshot or copies the state.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controlplane import __version__
from controlplane.service.metrics_figures import FederationFigures


class ServiceMetrics:
    """Loop durations, actions taken, HTTP requests, Raft role/term/commit index; ``federation``: the
    per-cluster figures (snapshot age among them), rendered per scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.loop_seconds = Histogram("guardian_loop_duration_seconds", "Duration of one loop pass",
                                      ["loop"], registry=self.registry)
        self.loop_errors = Counter("guardian_loop_errors_total", "Loop passes that failed", ["loop"],
                                   registry=self.registry)
        self.loop_runs = Counter("guardian_loop_runs_total", "Loop passes by outcome (ok, error, follower)",
                                 ["loop", "outcome"], registry=self.registry)
        self.loop_last_run = Gauge("guardian_loop_last_run_timestamp_seconds",
                                   "When the loop last finished a pass (Unix time)", ["loop"], registry=self.registry)
        self.open_anomalies = Gauge("guardian_open_anomalies", "Open anomalies (detected, confirmed, fixing)",
                                    ["cluster", "kind"], registry=self.registry)
        self.under_replicated = Gauge("guardian_under_replicated_partitions",
                                      "Partitions with a replica out of the ISR (a move's own new replicas "
                                      "excepted), per the self-healing loop's latest round", ["cluster"],
                                      registry=self.registry)
        self.under_replicated_seconds = Gauge("guardian_under_replicated_seconds",
                                              "How long the cluster has had at least one under-replicated "
                                              "partition (round clock; 0: none)", ["cluster"], registry=self.registry)
        self.federation = FederationFigures()
        self.actions = Counter("guardian_actions_total", "Commands committed to the replicated state", ["type"],
                               registry=self.registry)
        self.http_requests = Counter("guardian_http_requests_total", "HTTP requests served",
                                     ["method", "route", "status"], registry=self.registry)
        self.build_info = Gauge("guardian_build_info", "1, labelled with the version this node runs",
                                ["version", "python"], registry=self.registry)
        self.build_info.labels(version=__version__, python=platform.python_version()).set(1)
        self.raft_is_leader = Gauge("guardian_raft_is_leader", "1 when this node is the Raft leader",
                                    registry=self.registry)
        self.raft_term = Gauge("guardian_raft_term", "Current Raft term", registry=self.registry)
        self.raft_commit_index = Gauge("guardian_raft_commit_index", "Raft commit index", registry=self.registry)
        self.state_version = Gauge("guardian_state_version", "The replicated state's version (kind=group) and the "
                                   "highest this node's code applies (kind=supported); docs/upgrading.md",
                                   ["kind"], registry=self.registry)
        self.raft_held = Gauge("guardian_raft_held", "1 while this node holds: a committed entry needs a newer state "
                               "version than its code supports (upgrade it)", registry=self.registry)
        self.analytics_runs = Counter("guardian_analytics_runs_total", "Scheduled analytics runs", ["status"],
                                      registry=self.registry)
        self.analytics_last_run = Gauge("guardian_analytics_last_run_timestamp_seconds",
                                        "When the last scheduled analytics run finished (Unix time)",
                                        registry=self.registry)
        self.analytics_last_seconds = Gauge("guardian_analytics_last_run_duration_seconds",
                                            "Duration of the last scheduled analytics run", ["phase"],
                                            registry=self.registry)
        self.analytics_ingested = Counter("guardian_analytics_audit_records_total",
                                          "Audit records ingested by the scheduled analytics", ["outcome"],
                                          registry=self.registry)
        self.analytics_output_rows = Gauge("guardian_analytics_output_rows",
                                           "Result rows the last scheduled run wrote per job", ["job"],
                                           registry=self.registry)
