"""The analytics jobs on a real Spark standalone cluster give the results ``local[*]`` gives.

Goal: the jobs run unchanged with ``--master spark://...`` (README: analytics on a cluster). Method: start
a standalone master and two workers (1 core, 1 GiB each) on loopback from the installed PySpark's
``bin/spark-class``; seed a small audit window into chdb; run every job once on ``local[2]`` and once on
the cluster (the export is Parquet slices under a local directory every executor can read: one host);
compare every result table row by row (floats to 1e-6 relative). Guarantee: a job that depends on running
in the driver's JVM, on one partition or on task order fails here. Cost: ~3 min on 2 shared cores (three extra
JVMs, two sessions).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
pd = pytest.importorskip("pandas")

from analytics_spark.clickhouse import ClickHouse, connect  # noqa: E402
from analytics_spark.clickhouse.store import RESULT_TABLES  # noqa: E402
from analytics_spark.jobs import JobSettings, run, spark_session  # noqa: E402
from analytics_spark.seed import default_end, seed_audit  # noqa: E402
from raft.localcluster import free_ports  # noqa: E402
from tests.support.chdb_session import chdb_path, fresh_database  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
DAYS = 2


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("java") is None:
        pytest.skip("no java (make venv installs a JRE)")
    tmp = tmp_path_factory.mktemp("spark-standalone")
    port, ui, w1, w2 = free_ports(4)
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(tmp), "SPARK_WORKER_DIR": str(tmp / "work"),
           "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        log = (tmp / f"{name}.log").open("wb")
        procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))

        def state() -> dict[str, Any]:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as resp:
                return dict(json.loads(resp.read()))

        wait_until(lambda: state().get("status") == "ALIVE", 90, "the Spark master")
        for name, web in (("worker1", w1), ("worker2", w2)):
            start(name, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "1g", "--webui-port", str(web), "--work-dir", str(tmp / name))
        wait_until(lambda: state().get("aliveworkers") == 2, 90, "two registered workers")
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def results(ch: ClickHouse, table: str, run_id: str) -> Any:
    """One run's rows of ``table`` without ``run_id``, sorted by the non-float columns (floats, rounded, break ties)."""
    cols = [name for (name,) in ch.rows(
        "SELECT name FROM system.columns WHERE database = {d:String} AND table = {t:String} AND name != 'run_id' "
        "ORDER BY position", {"d": ch.database, "t": table})]
    df = ch.arrow(f"SELECT {', '.join(f'toString({c}) AS {c}' for c in cols)} FROM {ch.table(table)} "
                  "WHERE run_id = {r:String}", {"r": run_id}).to_pandas()
    floats = []
    for c in df.columns:  # toString keeps every type comparable; non-integer numbers compared to 1e-6 relative
        as_num = pd.to_numeric(df[c], errors="coerce")
        if as_num.notna().all() and not df[c].str.fullmatch(r"-?\d+").all():
            df[c] = as_num
            floats.append(c)
    ties = {f"_{c}": df[c].map(lambda v: float(f"{v:.3g}")) for c in floats}
    keyed = df.assign(**ties).sort_values([c for c in df.columns if c not in floats] + list(ties))
    return keyed.drop(columns=list(ties)).reset_index(drop=True)


def test_every_job_on_a_standalone_cluster_equals_local(master: str, tmp_path: Path) -> None:
    ch = connect(data_path=chdb_path(), database=fresh_database("t_spark_cluster"))
    try:
        end = default_end() - timedelta(hours=3)
        seed_audit(ch, rows=4_000, days=DAYS, end=end, seed=5, topics_per_cluster=4)
        settings = JobSettings(days=DAYS, end=end, idle_days=1, top_k=3)
        runs: dict[str, dict[str, str]] = {}
        for where in ("local[2]", master):
            session = spark_session(where, shuffle_partitions=2, driver_memory="1g") if where.startswith("local") \
                else cluster_session(where)
            try:
                session.sparkContext.setLogLevel("ERROR")
                assert session.sparkContext.master == where
                work_dir = tmp_path / ("local" if where.startswith("local") else "cluster")  # no [ ] (Hadoop globs)
                report = run(ch, ["all"], settings, spark=session, work_dir=work_dir)
                runs[where] = {j.job: j.run_id for j in report.jobs}
                if where == master:  # the work really ran on the workers' executors
                    executors = session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
                    assert executors >= 3, executors  # the driver plus one executor per worker
            finally:
                session.stop()
        assert set(runs["local[2]"]) == set(runs[master]) == set(RESULT_TABLES)
        rows = 0
        for job, tables in RESULT_TABLES.items():
            for table in tables:
                local = results(ch, table, runs["local[2]"][job])
                remote = results(ch, table, runs[master][job])
                assert len(local) > 0, table
                pd.testing.assert_frame_equal(local, remote, check_exact=False, rtol=1e-6, obj=table)
                rows += len(local)
        assert rows > 100
    finally:
        ch.command(f"DROP DATABASE IF EXISTS {ch.database}")
        ch.close()


def cluster_session(master: str) -> Any:
    """The jobs' session on ``master``: two 1-core executors of 512 MiB (the workers have 1 GiB each)."""
    return spark_session(master, shuffle_partitions=2, driver_memory="1g",
                         conf={"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                               "spark.executorEnv.PYTHONPATH": str(ROOT)})
