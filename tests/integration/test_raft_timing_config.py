"""``[raft]`` timing reaches the node ``guardian serve`` builds (a real pysyncobj node on a real port)."""

from __future__ import annotations

from pathlib import Path

from controlplane.bootstrap import build_service
from controlplane.config import RaftConf, Settings
from raft.localcluster import free_ports


def test_configured_timeouts_are_the_nodes_and_it_still_leads(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    raft = RaftConf(self_addr=f"127.0.0.1:{port}", heartbeat_ms=100, election_timeout_ms=[1000, 2000])
    svc = build_service(Settings(data_dir=tmp_path, raft=raft))
    try:
        s = svc.store.node.settings
        assert (s.heartbeat_period, s.election_timeout_min, s.election_timeout_max) == (0.1, 1.0, 2.0)
        svc.store.node.wait_ready(15)  # a one-node group elects itself after its (longer) timeout
        assert svc.store.is_leader
    finally:
        svc.close()
