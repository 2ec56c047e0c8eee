"""Read side of the analytics results (for the API, the planners and the throttle).

Every reader uses the latest *finished* run of its job (a row in ``analytics_runs``), so a run
being written is never visible half-done. All functions return plain dicts/lists and return
empty results (never raise) when a job has not run yet.
"""

from __future__ import annotations

import threading
from typing import Any

from analytics_spark.clickhouse import ClickHouse, ClickHouseBusy
from planners.load_basis import ModelledLoad
from planners.protection import ClientShare, Lineage


def latest_run_id(ch: ClickHouse, job: str) -> str | None:
    """The run id of ``job``'s latest finished run (None if it never ran)."""
    rid = ch.scalar(
        f"SELECT argMax(run_id, finished_at) FROM {ch.table('analytics_runs')} WHERE job = {{j:String}}",
        {"j": job},
    )
    return str(rid) if rid else None


RESULT_TABLES: dict[str, tuple[str, ...]] = {
    "traffic": ("traffic_profile", "traffic_forecast"),
    "lineage": ("topic_lineage",),
    "cost": ("tenant_cost",),
    "idle": ("idle_topics",),
    "cross_idc": ("cross_idc_traffic", "cross_idc_clients"),
}


def prune_runs(ch: ClickHouse, job: str, keep: int = 3) -> list[str]:
    """Delete result rows of all but the ``keep`` latest finished runs of ``job``; return pruned ids.

    Rows of runs that never finished (no ``analytics_runs`` row, e.g. a crashed run) older than
    the kept ones are deleted too.
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    runs = [str(r[0]) for r in ch.rows(
        f"SELECT run_id FROM {ch.table('analytics_runs')} WHERE job = {{j:String}} "
        "ORDER BY finished_at DESC", {"j": job})]
    kept = runs[:keep]
    if len(kept) < keep or not kept:
        return []
    pruned: set[str] = set()
    for table in RESULT_TABLES[job]:
        stale = ch.rows(
            f"SELECT DISTINCT run_id FROM {ch.table(table)} WHERE run_id NOT IN {{k:Array(String)}} "
            "AND run_id < {oldest:String}",
            {"k": kept, "oldest": min(kept)},
        )
        ids = [str(r[0]) for r in stale]
        if ids:
            ch.command(f"DELETE FROM {ch.table(table)} WHERE run_id IN {{ids:Array(String)}}", {"ids": ids})
            pruned.update(ids)
    return sorted(pruned)


def _dicts(ch: ClickHouse, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    return ch.records(sql, params)


def expected_peaks(ch: ClickHouse, cluster: str, topic: str) -> dict[int, dict[str, float]]:
    """Per partition (-1: whole topic): next-day forecast peak bytes/s in and out.

    What pre-allocation and peak-weighted balancing use instead of the last window's rate.
    """
    rid = latest_run_id(ch, "traffic")
    if rid is None:
        return {}
    rows = ch.rows(
        f"SELECT partition, toString(direction), forecast_peak_bps FROM {ch.table('traffic_forecast')} "
        "WHERE run_id = {r:String} AND cluster = {c:String} AND topic = {t:String}",
        {"r": rid, "c": cluster, "t": topic},
    )
    out: dict[int, dict[str, float]] = {}
    for p, d, v in rows:
        out.setdefault(int(p), {"in": 0.0, "out": 0.0})[d] = float(v)
    return out


def partition_peaks(ch: ClickHouse, cluster: str) -> ModelledLoad | None:
    """Every partition's next-day forecast peak write rate (bytes/s in) of ``cluster``, from the latest
    traffic run: what ``load_basis="modelled_peak"`` plans weigh. None before the first traffic run."""
    rid = latest_run_id(ch, "traffic")
    if rid is None:
        return None
    rows = ch.rows(
        f"SELECT topic, partition, forecast_peak_bps FROM {ch.table('traffic_forecast')} "
        "WHERE run_id = {r:String} AND cluster = {c:String} AND partition >= 0 AND direction = 'in' "
        "ORDER BY topic, partition",
        {"r": rid, "c": cluster},
    )
    return ModelledLoad(source=f"traffic run {rid}", bytes_in={(str(t), int(p)): float(v) for t, p, v in rows})


def traffic_model(ch: ClickHouse, cluster: str | None = None) -> dict[str, float]:
    """Topic -> expected peak bytes/s in (next-day forecast of the whole topic).

    Exactly the ``traffic_model`` mapping the pre-allocation planner takes (and the JSON of
    ``guardian plan preallocate --model``). Without ``cluster``, a topic name present in several
    clusters gets its largest forecast.
    """
    rid = latest_run_id(ch, "traffic")
    if rid is None:
        return {}
    rows = ch.rows(
        f"SELECT topic, max(forecast_peak_bps) FROM {ch.table('traffic_forecast')} "
        "WHERE run_id = {r:String} AND partition = -1 AND direction = 'in' "
        "AND ({c:String} = '' OR cluster = {c:String}) GROUP BY topic ORDER BY topic",
        {"r": rid, "c": cluster or ""},
    )
    return {str(t): float(v) for t, v in rows}


def weekly_profile(
    ch: ClickHouse, cluster: str, topic: str, partition: int = -1, direction: str = "in"
) -> list[dict[str, Any]]:
    """168 rows (hour of week 0 = Monday 00h UTC) of p50/p95/max/mean bytes/s."""
    rid = latest_run_id(ch, "traffic")
    if rid is None:
        return []
    return _dicts(
        ch,
        "SELECT hour_of_week, samples, p50_bps, p95_bps, max_bps, mean_bps "
        f"FROM {ch.table('traffic_profile')} "
        "WHERE run_id = {r:String} AND cluster = {c:String} AND topic = {t:String} "
        "AND partition = {p:Int32} AND direction = {d:String} ORDER BY hour_of_week",
        {"r": rid, "c": cluster, "t": topic, "p": partition, "d": direction},
    )


def topic_clients(ch: ClickHouse, cluster: str, topic: str, role: str | None = None) -> list[dict[str, Any]]:
    """Producers and/or consumers of a topic, largest first (what the throttle targets)."""
    rid = latest_run_id(ch, "lineage")
    if rid is None:
        return []
    role_filter = "" if role is None else "AND role = {role:String}"
    return _dicts(
        ch,
        f"SELECT toString(role) AS role, client_id, user, client_idc, bytes, records, requests, "
        f"first_seen, last_seen FROM {ch.table('topic_lineage')} WHERE run_id = {{r:String}} "
        f"AND cluster = {{c:String}} AND topic = {{t:String}} {role_filter} ORDER BY bytes DESC, client_id",
        {"r": rid, "c": cluster, "t": topic, "role": role or ""},
    )


def cluster_lineage(ch: ClickHouse, cluster: str) -> Lineage | None:
    """Topic -> producing and consuming client ids of ``cluster`` from the latest lineage run, each with its
    mean bytes/s over the run's window (what the throttle quotes when it has no per-partition shares).
    None before the first lineage run; empty maps when the run has no rows for the cluster."""
    run = ch.rows(
        f"SELECT run_id, toUnixTimestamp(window_start), toUnixTimestamp(window_end) "
        f"FROM {ch.table('analytics_runs')} WHERE job = 'lineage' ORDER BY finished_at DESC LIMIT 1")
    if not run:
        return None
    rid, start, end = str(run[0][0]), int(run[0][1]), int(run[0][2])
    seconds = max(end - start, 1)
    rows = ch.rows(
        f"SELECT topic, toString(role), client_id, sum(bytes) FROM {ch.table('topic_lineage')} "
        "WHERE run_id = {r:String} AND cluster = {c:String} AND client_id != '' "
        "GROUP BY topic, role, client_id ORDER BY topic, role, client_id",
        {"r": rid, "c": cluster},
    )
    consumers: dict[str, list[ClientShare]] = {}
    producers: dict[str, list[ClientShare]] = {}
    for topic, role, client, nbytes in rows:
        share = ClientShare(str(client), float(nbytes) / seconds)
        (producers if role == "producer" else consumers).setdefault(str(topic), []).append(share)
    return Lineage(topic_consumers={t: tuple(v) for t, v in consumers.items()},
                   topic_producers={t: tuple(v) for t, v in producers.items()},
                   topic_source=f"ClickHouse lineage run {rid}")


class LineageReader:
    """:func:`cluster_lineage` as the throttle's lineage port, re-read only when a new lineage run finished
    (one cheap ``analytics_runs`` lookup per call otherwise). Never stalls the throttle behind a long
    analytics query: when ClickHouse is held longer than ``wait_s`` the last lineage read for the cluster
    is returned (None if there is none). Thread-safe."""

    def __init__(self, ch: ClickHouse, wait_s: float = 0.2) -> None:
        self.ch = ch
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[str, Lineage | None]] = {}

    def __call__(self, cluster: str) -> Lineage | None:
        with self._lock:
            hit = self._cache.get(cluster)
        try:
            with self.ch.waiting_at_most(self.wait_s):
                rid = latest_run_id(self.ch, "lineage")
                if rid is None:
                    return None
                if hit is not None and hit[0] == rid:
                    return hit[1]
                lineage = cluster_lineage(self.ch, cluster)
        except ClickHouseBusy:
            return hit[1] if hit is not None else None
        with self._lock:
            self._cache[cluster] = (rid, lineage)
        return lineage


def latest_runs(ch: ClickHouse) -> list[dict[str, Any]]:
    """The latest finished run of every job: run id, engine, window, input/output rows, seconds."""
    rows = _dicts(
        ch,
        "SELECT job, run_id, engine, toString(window_start) AS start, toString(window_end) AS end, "
        "input_rows, output_rows, seconds, toString(finished_at) AS finished "
        f"FROM {ch.table('analytics_runs')} ORDER BY job, finished_at DESC LIMIT 1 BY job",
        {},
    )
    return [{**{k: v for k, v in r.items() if k not in ("start", "end", "finished")},
             "window_start": r["start"], "window_end": r["end"], "finished_at": r["finished"]} for r in rows]


def tenant_costs(ch: ClickHouse) -> list[dict[str, Any]]:
    """Cost rows per (cluster, pool, tenant), most expensive first."""
    rid = latest_run_id(ch, "cost")
    if rid is None:
        return []
    return _dicts(
        ch,
        f"SELECT * EXCEPT run_id FROM {ch.table('tenant_cost')} "
        "WHERE run_id = {r:String} ORDER BY cost DESC",
        {"r": rid},
    )


def idle_topics(ch: ClickHouse) -> list[dict[str, Any]]:
    """Topics with no producer or no consumer in the idle window."""
    rid = latest_run_id(ch, "idle")
    if rid is None:
        return []
    return _dicts(
        ch,
        f"SELECT * EXCEPT run_id FROM {ch.table('idle_topics')} WHERE run_id = {{r:String}} "
        "ORDER BY cluster, topic",
        {"r": rid},
    )


def cross_idc(ch: ClickHouse) -> dict[str, list[dict[str, Any]]]:
    """Leased-line usage per IDC pair and the top clients causing it."""
    rid = latest_run_id(ch, "cross_idc")
    if rid is None:
        return {"pairs": [], "clients": []}
    p = {"r": rid}
    return {
        "pairs": _dicts(ch, f"SELECT * EXCEPT run_id FROM {ch.table('cross_idc_traffic')} "
                            "WHERE run_id = {r:String} ORDER BY bytes DESC", p),
        "clients": _dicts(ch, f"SELECT * EXCEPT run_id FROM {ch.table('cross_idc_clients')} "
                              "WHERE run_id = {r:String} ORDER BY cluster, src_idc, dst_idc, rank", p),
    }


def fetch_flows(ch: ClickHouse, cluster: str, window_s: float = 3600.0) -> list[dict[str, Any]]:
    """Fetch bytes/s per (topic, client, client IDC, client rack, broker, broker IDC) over the ``window_s``
    seconds that end at the cluster's newest audit record (the KIP-392 read-local check's input)."""
    return _dicts(ch, f"""SELECT topic, client_id, client_idc, client_rack, broker, broker_idc,
                             sum(bytes) / {{w:Float64}} AS bytes_per_s
                          FROM {ch.table('audit_records')}
                          WHERE cluster = {{c:String}} AND api = 'fetch'
                            AND ts > (SELECT max(ts) FROM {ch.table('audit_records')} WHERE cluster = {{c:String}})
                                     - toIntervalSecond({{s:UInt32}})
                          GROUP BY topic, client_id, client_idc, client_rack, broker, broker_idc
                          ORDER BY topic, client_id, broker""",
                  {"c": cluster, "w": float(window_s), "s": int(window_s)})
