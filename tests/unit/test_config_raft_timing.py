"""``[raft]`` timing: heartbeat and election timeouts for both Raft groups, validated with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.config import RaftConf, load_settings
from domain import ContractError


def test_defaults_are_the_tuned_lan_settings() -> None:
    s = RaftConf().timing()
    assert (s.heartbeat_period, s.election_timeout_min, s.election_timeout_max) == (0.05, 0.2, 0.5)
    assert s.connection_timeout == 2.0


def test_slower_timeouts_reach_the_raft_settings_and_the_connection_timeout_follows() -> None:
    s = RaftConf(heartbeat_ms=100, election_timeout_ms=[1000, 2000]).timing(compaction_min_entries=20000)
    assert (s.heartbeat_period, s.election_timeout_min, s.election_timeout_max) == (0.1, 1.0, 2.0)
    assert s.compaction_min_entries == 20000
    assert RaftConf(heartbeat_ms=500, election_timeout_ms=[5000, 9000]).timing().connection_timeout == 9.0


@pytest.mark.parametrize(("body", "path", "words"), [
    ("election_timeout_ms = [500, 200]", "$.raft", "min < max"),
    ("heartbeat_ms = 100\nelection_timeout_ms = [200, 500]", "$.raft", "3 x heartbeat_ms"),
    ("election_timeout_ms = [200]", "$.raft.election_timeout_ms", "at least 2"),
    ("election_timeout_ms = [10, 500]", "$.raft.election_timeout_ms[0]", "greater than or equal to 50"),
    ("heartbeat_ms = 0", "$.raft.heartbeat_ms", "greater than or equal to 10"),
])
def test_bad_timing_is_refused_naming_the_key(tmp_path: Path, body: str, path: str, words: str) -> None:
    conf = tmp_path / "guardian.toml"
    conf.write_text(f"[raft]\n{body}\n")
    with pytest.raises(ContractError) as err:
        load_settings(conf)
    problems = err.value.problems
    assert any(p.path == path and words in p.message for p in problems), problems
