"""RaftNode in-process over real TCP on 127.0.0.1: proposals, callbacks, restarts, snapshots."""

from __future__ import annotations

import contextlib
import errno
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from raft.demo import DemoStateMachine, validate_demo_command
from raft.errors import NodeClosed, NotLeaderError, StartupRefused, StorageFull
from raft.localcluster import free_ports
from raft.node import RaftNode, RaftSettings
from raft.protocol import CommandConflict, CommandRejected, JsonDict

pytestmark = pytest.mark.timeout(60)

KEY = b"test-group-shared-raft-key-0123456789"


class BuggyMachine(DemoStateMachine):
    """Raises an unexpected error on 'boom' (a state machine bug must not wedge replication)."""

    def apply(self, command: JsonDict) -> Any:
        if command["type"] == "boom":
            raise RuntimeError("bug")
        return super().apply(command)


class Events:
    def __init__(self) -> None:
        self.gained: list[int] = []
        self.lost = 0
        self.lock = threading.Lock()

    def on_gained(self, term: int) -> None:
        with self.lock:
            self.gained.append(term)

    def on_lost(self) -> None:
        with self.lock:
            self.lost += 1


def wait_for(pred: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return bool(pred())


def test_single_node_proposes_rejects_and_recovers_from_journal(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    addr = f"127.0.0.1:{port}"
    ev = Events()
    node = RaftNode(
        addr,
        [],
        DemoStateMachine(),
        tmp_path / "n",
        validator=validate_demo_command,
        on_leader_gained=ev.on_gained,
        on_leader_lost=ev.on_lost,
    )
    try:
        assert node.wait_ready(5)
        assert wait_for(lambda: ev.gained == [node.status()["term"]])
        st = node.status()
        assert st["role"] == "leader" and st["leader"] == addr and st["ready"]
        first = node.propose_committed({"type": "allocate_ids", "count": 3})
        assert first.result == {"namespace": "default", "first": 1, "last": 3}
        second = node.propose_committed({"type": "put", "key": "k", "value": {"x": 1}})
        assert second.index > first.index and second.result == {"key": "k", "version": 1}
        commit = node.status()["commit_index"]
        for bad in ({"type": "put", "key": "k"}, {"type": "raft.barrier"}, {"no": "type"}):
            with pytest.raises(CommandRejected) as info:
                node.propose(bad)
            assert not isinstance(info.value, CommandConflict)
        assert node.status()["commit_index"] == commit, "invalid commands must not be proposed"
        with pytest.raises(CommandConflict, match="version of 'k' is 1"):
            node.propose({"type": "cas", "key": "k", "expected_version": 5, "value": 0})
        assert node.read(lambda sm: sm.kv["k"]) == {"value": {"x": 1}, "version": 1}
        expected_hash, _ = node.state_hash()
    finally:
        node.close()
    assert ev.lost == 1, "closing a leader reports the lost leadership"
    with pytest.raises(NodeClosed):
        node.propose({"type": "put", "key": "z", "value": 1})

    again = RaftNode(addr, [], DemoStateMachine(), tmp_path / "n", validator=validate_demo_command)
    try:
        assert again.wait_ready(5)
        assert again.state_hash()[0] == expected_hash
        assert again.propose({"type": "allocate_ids", "count": 1})["first"] == 4
    finally:
        again.close()


def test_state_machine_errors_become_rejections_and_snapshots_restore(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    addr = f"127.0.0.1:{port}"
    settings = RaftSettings(compaction_min_entries=50)
    node = RaftNode(addr, [], BuggyMachine(), tmp_path / "n", settings=settings)
    try:
        assert node.wait_ready(5)
        with pytest.raises(CommandConflict, match="internal error"):
            node.propose({"type": "boom"})
        for i in range(300):
            node.propose({"type": "put", "key": f"k{i % 120}", "value": i})
        assert wait_for(lambda: (tmp_path / "n" / "snapshot.bin").exists())
        assert node.status()["log_len"] < 300, "the log was compacted"
        expected = node.state()
    finally:
        node.close()
    again = RaftNode(addr, [], BuggyMachine(), tmp_path / "n", settings=settings)
    try:
        assert again.wait_ready(5)
        snap, index = again.state()
        assert snap == expected[0] and index >= expected[1]
        assert snap["kv"]["k59"] == {"value": 299, "version": 3}
    finally:
        again.close()


def test_three_in_process_nodes_hand_over_leadership(tmp_path: Path) -> None:
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    events = [Events() for _ in addrs]
    nodes = []
    try:
        for i, addr in enumerate(addrs):
            nodes.append(
                RaftNode(
                    addr,
                    addrs,
                    DemoStateMachine(),
                    tmp_path / f"n{i}",
                    on_leader_gained=events[i].on_gained,
                    on_leader_lost=events[i].on_lost,
                    key=KEY,
                )
            )
        assert wait_for(lambda: any(n.ready and n.is_leader for n in nodes), 10)
        leader = next(i for i, n in enumerate(nodes) if n.is_leader)
        assert wait_for(lambda: events[leader].gained != [])
        assert wait_for(lambda: all(n.leader == addrs[leader] for n in nodes))
        follower = (leader + 1) % 3
        with pytest.raises(NotLeaderError) as info:
            nodes[follower].propose({"type": "put", "key": "a", "value": 1})
        assert info.value.leader == addrs[leader] and addrs[leader] in str(info.value)
        assert nodes[leader].propose({"type": "put", "key": "a", "value": 1}) == {"key": "a", "version": 1}
        assert wait_for(lambda: nodes[follower].ready and nodes[follower].state()[0]["kv"].get("a") is not None)

        t0 = time.monotonic()
        nodes[leader].close()
        assert events[leader].lost == 1
        rest = [n for i, n in enumerate(nodes) if i != leader]
        assert wait_for(lambda: any(n.is_leader and n.ready for n in rest), 5)
        print(f"in-process handover after close: {time.monotonic() - t0:.2f}s")
        new = next(i for i, n in enumerate(nodes) if i != leader and n.is_leader)
        assert wait_for(lambda: events[new].gained != [])
        assert events[new].gained[-1] > events[leader].gained[-1], "terms only grow"
        assert nodes[new].propose({"type": "put", "key": "a", "value": 2}) == {"key": "a", "version": 2}
        other = next(i for i in range(3) if i not in (leader, new))
        assert wait_for(lambda: nodes[other].state_hash()[0] == nodes[new].state_hash()[0])
    finally:
        for n in nodes:
            n.close()


def test_busy_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        addr = f"127.0.0.1:{busy.getsockname()[1]}"
        settings = RaftSettings(bind_retries=2, bind_retry_time=0.05)
        with pytest.raises(NodeClosed, match="cannot bind"):
            RaftNode(addr, [], DemoStateMachine(), tmp_path / "n", settings=settings)


def test_bad_addresses_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host:port"):
        RaftNode("localhost", [], DemoStateMachine(), tmp_path / "n")
    with pytest.raises(ValueError, match="host:port"):
        RaftNode("127.0.0.1:1", ["127.0.0.1:99999"], DemoStateMachine(), tmp_path / "n")


def test_node_built_on_a_short_lived_thread_keeps_running(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    box: list[RaftNode] = []
    maker = threading.Thread(
        target=lambda: box.append(RaftNode(f"127.0.0.1:{port}", [], DemoStateMachine(), tmp_path / "n"))
    )
    maker.start()
    maker.join()
    node = box[0]
    try:
        assert node.wait_ready(5)
        time.sleep(0.3)  # well after the creating thread has gone
        assert node.propose({"type": "allocate_ids", "count": 2})["first"] == 1
    finally:
        node.close()


def test_leader_cut_off_from_majority_steps_down_within_an_election_timeout(tmp_path: Path) -> None:
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    events = [Events() for _ in addrs]
    nodes: list[RaftNode] = []
    try:
        for i, addr in enumerate(addrs):
            nodes.append(
                RaftNode(addr, addrs, DemoStateMachine(), tmp_path / f"n{i}", on_leader_lost=events[i].on_lost,
                         key=KEY)
            )
        assert wait_for(lambda: any(n.ready and n.is_leader for n in nodes), 10)
        leader = next(i for i, n in enumerate(nodes) if n.is_leader)
        t0 = time.monotonic()
        for i, n in enumerate(nodes):
            if i != leader:
                n.close()
        assert wait_for(lambda: events[leader].lost == 1, 3)
        took = time.monotonic() - t0
        settings = nodes[leader].settings
        assert not nodes[leader].is_leader and not nodes[leader].ready
        assert took <= settings.election_timeout_max + 0.5, f"stepped down after {took:.2f}s"
        with pytest.raises(NotLeaderError):
            nodes[leader].propose({"type": "put", "key": "k", "value": 1})
    finally:
        for n in nodes:
            n.close()


def test_a_multi_node_group_refuses_to_start_without_a_key_and_a_lone_node_makes_its_own(tmp_path: Path) -> None:
    a, b = (f"127.0.0.1:{p}" for p in free_ports(2))
    with pytest.raises(StartupRefused, match="shared key"):
        RaftNode(a, [b], DemoStateMachine(), tmp_path / "multi")
    node = RaftNode(a, [], DemoStateMachine(), tmp_path / "single")
    try:
        key_file = tmp_path / "single" / "raft.key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert len(key_file.read_text().strip()) >= 32
        assert node.wait_ready(5)
    finally:
        node.close()


def test_a_full_disk_refuses_proposals_clearly_and_the_node_recovers(tmp_path: Path) -> None:
    full = {"on": False}

    def fault(op: str) -> None:
        if full["on"] and op == "add":
            raise OSError(errno.ENOSPC, "No space left on device")

    (port,) = free_ports(1)
    node = RaftNode(f"127.0.0.1:{port}", [], DemoStateMachine(), tmp_path / "n", journal_fault=fault)
    try:
        assert node.wait_ready(5)
        assert node.propose({"type": "put", "key": "a", "value": 1}) == {"key": "a", "version": 1}
        full["on"] = True
        t0 = time.monotonic()
        with pytest.raises(StorageFull, match="no space left"):
            node.propose({"type": "put", "key": "b", "value": 1}, timeout=5)
        assert time.monotonic() - t0 < 2, "refused at once, not after the proposal timeout"
        with pytest.raises(StorageFull):
            node.propose({"type": "put", "key": "c", "value": 1}, timeout=5)
        assert node.status()["storage_error"]
        full["on"] = False
        time.sleep(1.1)
        assert node.propose({"type": "put", "key": "d", "value": 1}) == {"key": "d", "version": 1}
        assert node.read(lambda sm: sorted(sm.kv)) == ["a", "d"]
    finally:
        node.close()


def test_step_down_hands_leadership_to_a_caught_up_follower(tmp_path: Path) -> None:
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    nodes: list[RaftNode] = []
    try:
        nodes = [RaftNode(a, addrs, DemoStateMachine(), tmp_path / f"n{i}", key=KEY) for i, a in enumerate(addrs)]
        assert wait_for(lambda: any(n.ready and n.is_leader for n in nodes), 10)
        leader = next(i for i, n in enumerate(nodes) if n.is_leader)
        nodes[leader].propose({"type": "put", "key": "k", "value": 1})
        assert wait_for(lambda: all(n.state()[1] == nodes[leader].state()[1] for n in nodes))
        assert nodes[leader].step_down("test")
        assert wait_for(lambda: any(n.is_leader and n.ready for i, n in enumerate(nodes) if i != leader), 5)
        assert not nodes[leader].is_leader
    finally:
        for n in nodes:
            n.close()


def test_pysyncobj_errors_reach_the_log_without_any_logging_configured() -> None:
    code = ("import logging, raft.node; logging.getLogger('pysyncobj.syncobj').error('boom from pysyncobj'); "
            "logging.getLogger('pysyncobj.syncobj').critical('truncating already-applied log entries from 3'); "
            "print(raft.node._TRUNCATIONS.count)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "boom from pysyncobj" in done.stderr and "truncating already-applied" in done.stderr
    assert done.stdout.strip() == "1"


@contextlib.contextmanager
def three_nodes(root: Path) -> Iterator[list[RaftNode]]:
    """Three in-process nodes with the shared key; all closed after."""
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    nodes: list[RaftNode] = []
    try:
        nodes = [RaftNode(a, addrs, DemoStateMachine(), root / f"n{i}", key=KEY) for i, a in enumerate(addrs)]
        yield nodes
    finally:
        for n in nodes:
            n.close()


def test_a_leader_below_its_disk_reserve_hands_leadership_over_and_recovers(tmp_path: Path) -> None:
    with three_nodes(tmp_path) as nodes:
        assert wait_for(lambda: any(n.ready and n.is_leader for n in nodes), 10)
        full = next(i for i, n in enumerate(nodes) if n.is_leader)
        nodes[full].propose({"type": "put", "key": "a", "value": 1})
        assert wait_for(lambda: all(n.state()[1] == nodes[full].state()[1] for n in nodes))
        reserve = nodes[full].settings
        nodes[full].settings = replace(reserve, min_free_bytes=1 << 62)  # its disk is now below the reserve
        t0 = time.monotonic()
        assert wait_for(lambda: any(n.is_leader and n.ready for i, n in enumerate(nodes) if i != full), 10)
        handed_over_s = time.monotonic() - t0
        assert handed_over_s < 10 and not nodes[full].is_leader
        assert not nodes[full].ready and nodes[full].status()["storage_error"]
        leader = next(n for n in nodes if n.is_leader)
        assert leader.propose({"type": "put", "key": "b", "value": 1}) == {"key": "b", "version": 1}
        nodes[full].settings = reserve  # space is back
        assert wait_for(lambda: nodes[full].ready, 10)
        assert wait_for(lambda: nodes[full].read(lambda sm: sorted(sm.kv)) == ["a", "b"], 5)
        print(f"\nleader below its disk reserve handed leadership over in {handed_over_s:.2f} s")


def test_a_follower_below_its_disk_reserve_is_not_ready_until_space_is_back(tmp_path: Path) -> None:
    with three_nodes(tmp_path) as nodes:
        assert wait_for(lambda: all(n.ready for n in nodes), 10)
        follower = next(n for n in nodes if not n.is_leader)
        reserve = follower.settings
        follower.settings = replace(reserve, min_free_bytes=1 << 62)
        assert not follower.ready and follower.status()["storage_error"]
        follower.settings = reserve
        assert wait_for(lambda: follower.ready, 5)
        assert follower.status()["storage_error"] is None
