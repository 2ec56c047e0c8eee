"""Benchmark: N audit rows → every analytics model, Spark vs ClickHouse SQL alone, same run.

    python -m benchmarks.bench_analytics --rows 10000000

Steps, each timed: seed N rows into a fresh chdb (the minute rollups are then rebuilt from the raw
table, as the ingest does per batch); the ClickHouse-only baseline (every model as SQL over
the rollups); the Spark path (day-sliced export with aggregation pushed down to ClickHouse,
local[2] Spark, results written back); a cross-check that both agree; the weekly-profile plot.
Prints a table and writes JSON to out/bench/analytics.json (PNG beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from analytics_spark.clickhouse import ClickHouse, connect
from analytics_spark.jobs import JobSettings, latest_run_id, run, spark_session
from analytics_spark.plot import plot_profile
from analytics_spark.seed import default_end, seed_audit
from analytics_spark.sql.baseline import run_baseline


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def _peak_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _self_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _agreement(ch: ClickHouse) -> dict[str, float]:
    t = ch.table
    rid = latest_run_id(ch, "traffic")
    prof = ch.rows(
        f"""SELECT count(), max(abs(a.p50_bps - b.p50_bps)), max(abs(a.p95_bps - b.p95_bps)),
                   max(abs(a.max_bps - b.max_bps)), max(abs(a.mean_bps - b.mean_bps))
            FROM {t("traffic_profile")} AS a INNER JOIN {t("bl_traffic_profile")} AS b
            ON a.cluster = b.cluster AND a.topic = b.topic AND a.partition = b.partition
               AND toString(a.direction) = b.direction AND a.hour_of_week = b.hour_of_week
            WHERE a.run_id = {{r:String}}""",
        {"r": rid},
    )[0]
    fc = ch.rows(
        f"""SELECT count(),
                   max(abs(a.forecast_peak_bps - b.forecast_peak_bps) / greatest(1, b.forecast_peak_bps)),
                   countIf(a.forecast_peak_hour != b.forecast_peak_hour)
            FROM {t("traffic_forecast")} AS a INNER JOIN {t("bl_traffic_forecast")} AS b
            ON a.cluster = b.cluster AND a.topic = b.topic AND a.partition = b.partition
               AND toString(a.direction) = b.direction
            WHERE a.run_id = {{r:String}}""",
        {"r": rid},
    )[0]
    lin = ch.rows(
        f"""SELECT count() FROM (
              SELECT cluster, topic, toString(role), client_id, user, client_idc, bytes, records, requests
              FROM {t("topic_lineage")} WHERE run_id = {{r:String}}
              EXCEPT
              SELECT cluster, topic, role, client_id, user, client_idc, bytes, records, requests
              FROM {t("bl_topic_lineage")})""",
        {"r": latest_run_id(ch, "lineage")},
    )[0]
    cost = ch.rows(
        f"""SELECT count() FROM (
              SELECT cluster, pool, tenant, topics, partitions, replicas, bytes_in, bytes_out, storage_bytes
              FROM {t("tenant_cost")} WHERE run_id = {{r:String}}
              EXCEPT
              SELECT cluster, pool, tenant, topics, partitions, replicas, bytes_in, bytes_out, storage_bytes
              FROM {t("bl_tenant_cost")})""",
        {"r": latest_run_id(ch, "cost")},
    )[0]
    return {
        "profile_rows_compared": prof[0],
        "profile_max_abs_diff_p50": prof[1],
        "profile_max_abs_diff_p95": prof[2],
        "profile_max_abs_diff_max": prof[3],
        "profile_max_abs_diff_mean": prof[4],
        "forecast_rows_compared": fc[0],
        "forecast_max_rel_diff_peak": fc[1],
        "forecast_peak_hour_mismatches": fc[2],
        "lineage_rows_differing": lin[0],
        "cost_rows_differing": cost[0],
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--days", type=int, default=14)
    p.add_argument("--topics-per-cluster", type=int, default=40)
    p.add_argument("--shuffle-partitions", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("out/bench"))
    p.add_argument("--chdb-path", type=Path, default=None, help="default: a fresh temp dir")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = None
    path = a.chdb_path
    if path is None:
        tmp = tempfile.mkdtemp(prefix="guardian-bench-chdb-")
        path = Path(tmp)
    try:
        ch = connect(data_path=path, database="bench")
        end = default_end()
        t0 = time.perf_counter()
        seed_audit(ch, rows=a.rows, days=a.days, end=end, topics_per_cluster=a.topics_per_cluster)
        seed_s = time.perf_counter() - t0
        window = JobSettings(days=a.days, end=end).window()
        rollup_rows = {
            "audit_partition_minute": int(
                ch.scalar(
                    f"SELECT count() FROM (SELECT 1 FROM {ch.table('audit_partition_minute')} "
                    "GROUP BY cluster, topic, partition, api, minute)"
                )
            ),
            "audit_client_minute": int(ch.scalar(f"SELECT count() FROM {ch.table('audit_client_minute')}")),
        }
        rss_after_seed = _self_peak_mb()

        t0 = time.perf_counter()
        base = run_baseline(ch, window.start, window.end)
        base_s = time.perf_counter() - t0
        rss_after_baseline = _self_peak_mb()

        t0 = time.perf_counter()
        spark = spark_session("local[2]", a.shuffle_partitions, driver_memory="3g")
        spark.sparkContext.setLogLevel("ERROR")
        start_s = time.perf_counter() - t0
        work = Path(tempfile.mkdtemp(prefix="guardian-bench-slices-"))
        t0 = time.perf_counter()
        rep = run(ch, ["all"], JobSettings(days=a.days, end=end), spark=spark, work_dir=work)
        spark_s = time.perf_counter() - t0
        jvm = {pid: _peak_rss_mb(pid) for pid in _descendants(os.getpid())}
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        agree = _agreement(ch)

        top = ch.rows(
            f"SELECT cluster, topic FROM {ch.table('audit_partition_minute')} "
            "GROUP BY cluster, topic ORDER BY sum(bytes) DESC LIMIT 1"
        )[0]
        png = a.out / "analytics_profile.png"
        plot_profile(ch, cluster=top[0], topic=top[1], out=png)

        per_job = {j.job: {"seconds": round(j.seconds, 3), "output_rows": j.output_rows} for j in rep.jobs}
        result: dict[str, object] = {
            "benchmark": "analytics",
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "rows": a.rows,
            "days": a.days,
            "topics_per_cluster": a.topics_per_cluster,
            "rollup_rows": rollup_rows,
            "seed": {"seconds": round(seed_s, 3), "rows_per_s": round(a.rows / seed_s)},
            "clickhouse_sql_baseline": {
                "seconds": round(base_s, 3),
                "rows_per_s": round(a.rows / base_s),
                "models": {
                    k: {"rows": int(v["rows"]), "seconds": round(v["seconds"], 3)} for k, v in base.items()
                },
            },
            "spark": {
                "seconds": round(spark_s, 3),
                "rows_per_s": round(a.rows / spark_s),
                "session_start_seconds": round(start_s, 3),
                "export_seconds": round(rep.export.seconds, 3),
                "export_rows": rep.export.rows,
                "slices": len(rep.export.files.get("series_minute", [])),
                "jobs": per_job,
            },
            "memory_mb": {
                "service_process_peak_after_seed": round(rss_after_seed),
                "service_process_peak_after_baseline": round(rss_after_baseline),
                "service_process_peak_end": round(_self_peak_mb()),
                "spark_jvm_and_workers_peak": {str(k): round(v) for k, v in jvm.items() if v > 0},
                "spark_jvm_and_workers_peak_total": round(sum(jvm.values())),
            },
            "agreement": agree,
            "plot": str(png),
        }
        (a.out / "analytics.json").write_text(json.dumps(result, indent=2))
        _print(result)
        ch.close()
        return result
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _print(r: dict[str, object]) -> None:
    b, s, m = r["clickhouse_sql_baseline"], r["spark"], r["memory_mb"]
    assert isinstance(b, dict) and isinstance(s, dict) and isinstance(m, dict)
    print(
        f"\nanalytics benchmark: {r['rows']:,} audit rows over {r['days']} days, rollups {r['rollup_rows']}"
    )
    print(f"{'path':<34}{'wall s':>10}{'rows/s':>14}")
    seed = r["seed"]
    assert isinstance(seed, dict)
    print(f"{'seed (insert + MV rollups)':<34}{seed['seconds']:>10.1f}{seed['rows_per_s']:>14,}")
    print(f"{'ClickHouse SQL alone (all models)':<34}{b['seconds']:>10.1f}{b['rows_per_s']:>14,}")
    print(f"{'Spark local[2] (export+jobs+write)':<34}{s['seconds']:>10.1f}{s['rows_per_s']:>14,}")
    print(
        f"  export slices {s['export_seconds']:.1f}s {s['export_rows']}; "
        f"session start {s['session_start_seconds']:.1f}s"
    )
    for job, v in s["jobs"].items():
        print(f"  spark {job:<12}{v['seconds']:>8.1f}s  {v['output_rows']}")
    for job, v in b["models"].items():
        print(f"  sql   {job:<18}{v['seconds']:>8.2f}s  rows {v['rows']}")
    print(
        f"memory MB: service process peak {m['service_process_peak_end']}, "
        f"Spark JVM+workers peak {m['spark_jvm_and_workers_peak_total']}"
    )
    print(f"agreement Spark vs SQL: {r['agreement']}")
    print(f"plot: {r['plot']}")


if __name__ == "__main__":
    main()
