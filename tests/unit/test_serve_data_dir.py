"""Where ``guardian serve`` keeps a node's state: ``--data-dir``, else the config's ``data_dir``, else a default.

Before: with ``--node-id`` the config's ``data_dir`` was ignored (state went to ``./var/guardian-N``), which is
what README's multi-node recipe (one config per node, ``--node-id``) runs into.
"""

from __future__ import annotations

from pathlib import Path

from controlplane.cli.serve import node_data_dir
from controlplane.config import load_settings


def test_the_config_s_data_dir_holds_with_a_node_id(tmp_path: Path) -> None:
    conf = tmp_path / "guardian.toml"
    conf.write_text('data_dir = "/var/lib/guardian"\n')
    settings = load_settings(conf)
    assert node_data_dir(settings, 2, None) == Path("/var/lib/guardian")
    assert node_data_dir(settings, None, None) == Path("/var/lib/guardian")
    assert node_data_dir(settings, 2, tmp_path / "x") == tmp_path / "x"  # --data-dir wins


def test_without_one_local_nodes_get_their_own_directories(tmp_path: Path) -> None:
    conf = tmp_path / "guardian.toml"
    conf.write_text("[http]\nport = 8081\n")
    settings = load_settings(conf)
    assert node_data_dir(settings, 2, None) == Path("var/guardian-2")
    assert node_data_dir(load_settings(None), None, None) == Path("var/guardian")
