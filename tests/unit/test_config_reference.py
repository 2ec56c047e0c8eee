"""docs/config-reference.md matches the models; deploy/guardian.toml is complete and loads; tokens_file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from controlplane.config import Settings, load_settings
from controlplane.config_reference import reference
from domain import ContractError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "deploy" / "guardian.toml"
TOKENS = '[[tokens]]\nname = "ops"\nrole = "operator"\nsha256 = "' + "a" * 64 + '"\n'


def test_the_committed_reference_is_what_the_models_generate() -> None:
    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == reference(), ("docs/config-reference.md drifted from controlplane/config.py: run "
                                      "`python -m controlplane.config_reference > docs/config-reference.md`")


def test_the_reference_names_every_key_of_every_section() -> None:
    text = reference()
    for section in ("[raft]", "[http]", "[[tokens]]", "[intervals]", "[clickhouse]", "[throttle]",
                    "[throttle.thresholds.<hdd\\|ssd\\|nvme>]", "[analytics]", "[[notifications]]"):
        assert f"## {section}\n" in text, section
    for name in Settings.model_fields["analytics"].annotation.model_fields:  # type: ignore[union-attr]
        assert f"| `{name}` |" in text, name


def sample_here(tmp_path: Path) -> Path:
    """deploy/guardian.toml with its credential paths pointed at files under ``tmp_path``."""
    (tmp_path / "tokens.toml").write_text(TOKENS)
    (tmp_path / "raft.key").write_text("k" * 44)
    text = SAMPLE.read_text().replace("/run/credentials/guardian.service/", f"{tmp_path}/")
    path = tmp_path / "guardian.toml"
    path.write_text(text)
    return path


def test_the_sample_sets_every_key_and_loads(tmp_path: Path) -> None:
    settings = load_settings(sample_here(tmp_path))
    assert [t.name for t in settings.tokens] == ["ops"]  # appended from tokens_file
    assert settings.raft.peers and settings.raft.key_file == tmp_path / "raft.key"
    raw = tomllib.loads(SAMPLE.read_text())

    def missing(model: Any, table: dict, where: str) -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            sub = field.annotation
            if name in ("tokens", "thresholds", "key_env", "url", "path"):  # commented out or one of two
                continue
            if name not in table:
                out.append(where + name)
            elif isinstance(table[name], dict) and hasattr(sub, "model_fields"):
                out += missing(sub, table[name], f"{where}{name}.")
        return out

    assert missing(Settings, raw, "") == []
    assert set(raw["throttle"]["thresholds"]) == {"hdd", "nvme"}


def test_tokens_file_problems_name_the_file_and_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    conf.write_text(f'tokens_file = "{tmp_path}/t.toml"\n')
    with pytest.raises(ContractError) as missing:
        load_settings(conf)
    assert "tokens_file" in str(missing.value) and "cannot read" in str(missing.value)
    (tmp_path / "t.toml").write_text('[[tokens]]\nname = "x"\nrole = "root"\nsha256 = "' + "a" * 64 + '"\n')
    with pytest.raises(ContractError) as bad:
        load_settings(conf)
    assert "$.tokens[0].role" in str(bad.value)
