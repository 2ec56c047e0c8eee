"""A `guardian serve` node started by the launcher does not outlive its starter, however that one died.

The nodes run in their own session (the launcher kills their process groups), so a test run killed before
its teardown would leak Raft nodes; ``serve --exit-with-parent`` (passed by the launcher) stops a node once
its parent is gone. Here a launcher-like parent starts one node and is SIGKILLed (no teardown runs); the
node must stop in order — its log says why — within a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]
PARENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from controlplane.launcher import ServiceCluster
    group = ServiceCluster(Path(sys.argv[1]), size=1)
    group.start_all()
    group.wait_up(timeout=60)
    print(group.procs[1].pid, flush=True)
    time.sleep(600)  # until killed: no teardown ever runs
""")


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan is reaped by whatever adopted it, maybe late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def orphan(script: str, root: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Run ``script`` (which starts one node and prints its pid) as a parent; yield the parent and the node's
    pid. Whatever the test does, neither outlives it (the node's process group is killed last)."""
    parent = subprocess.Popen([sys.executable, "-c", script, str(root)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))})
    node = 0
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"the parent did not start its node: {line!r}"
        node = int(line)
        yield parent, node
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if node and _running(node):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(node, signal.SIGKILL)


def _stopped_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _running(pid)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_node_exits_when_its_launcher_is_killed(tmp_path: Path, sig: signal.Signals) -> None:
    with orphan(PARENT, tmp_path / "group") as (parent, node):
        assert _running(node)
        parent.send_signal(sig)  # SIGTERM: Python's default action, no handler and no teardown either
        parent.wait(10)
        stopped = _stopped_within(node, 15)
        log = (tmp_path / "group" / "node1.log").read_text(errors="replace")
        assert stopped, f"node {node} outlived its parent; its log:\n{log[-2000:]}"
        assert "has exited: stopping (--exit-with-parent)" in log  # the watch stopped it, in order:
        assert re.search(r"node \S+ stopping", log)  # serve's own shutdown ran


RAFT_PARENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from raft.localcluster import LocalCluster
    cluster = LocalCluster(1, Path(sys.argv[1])).start()
    cluster.wait_leader(timeout=30)
    print(cluster.nodes[0].proc.pid, flush=True)
    time.sleep(600)  # until killed: no teardown ever runs
""")


def test_raft_test_node_exits_when_its_cluster_owner_is_killed(tmp_path: Path) -> None:
    # raft.localcluster's nodes share the owner's session, so a SIGKILLed test run orphans them unless they
    # watch their parent (node_main --exit-with-parent, which LocalCluster passes)
    with orphan(RAFT_PARENT, tmp_path / "raft") as (parent, node):
        parent.kill()
        parent.wait(10)
        assert _stopped_within(node, 15), f"raft node {node} outlived its parent"
