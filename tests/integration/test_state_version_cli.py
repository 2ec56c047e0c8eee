"""``guardian state version show|raise`` against a served one-node controller (real API, real Raft node)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from controlplane.cli.app import app
from controlplane.config import TokenConf, hash_token
from tests.support.service_support import served_service

TOKENS = [TokenConf(name="admin", role="admin", sha256=hash_token("admin-t")),
          TokenConf(name="viewer", role="viewer", sha256=hash_token("viewer-t"))]


def put_labels(url: str, labels: dict[str, str]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url + "/api/v1/clusters/c1/labels", data=json.dumps({"labels": labels}).encode(),
                                 method="PUT", headers={"Authorization": "Bearer admin-t",
                                                        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_show_and_raise_the_state_version_from_the_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    with served_service(tmp_path, tokens=TOKENS) as (svc, url):
        svc.store.propose({"type": "cluster.register", "meta": {"who": "t", "at": "2026-11-29T00:00:00Z"},
                           "name": "c1", "bootstrap_servers": ["127.0.0.1:9092"]})
        shown = runner.invoke(app, ["state", "version", "show", "--url", url, "--token", "viewer-t"])
        assert shown.exit_code == 0 and "group state version 1" in shown.output, shown.output
        assert "2: cluster labels" in shown.output
        code, body = put_labels(url, {"team": "payments"})
        assert code == 409 and "guardian state version raise 2" in str(body["detail"])
        refused = runner.invoke(app, ["state", "version", "raise", "2", "--url", url, "--token", "viewer-t"])
        assert refused.exit_code == 1 and "HTTP 403" in refused.output
        raised = runner.invoke(app, ["state", "version", "raise", "2", "--url", url, "--token", "admin-t",
                                     "--why", "release with labels"])
        assert raised.exit_code == 0 and "state version 2 (was 1)" in raised.output, raised.output
        shown = runner.invoke(app, ["state", "version", "show", "--json", "--url", url, "--token", "viewer-t"])
        assert json.loads(shown.output)["group"] == 2
        assert put_labels(url, {"team": "payments"}) == (200, {"name": "c1", "labels": {"team": "payments"}})
        down = runner.invoke(app, ["state", "version", "raise", "1", "--url", url, "--token", "admin-t"])
        assert down.exit_code == 1 and "never go down" in down.output
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        assert 'guardian_state_version{kind="group"} 2.0' in metrics and "guardian_raft_held 0.0" in metrics
        actions = svc.store.read(lambda s: [a for a in s["actions"] if a["type"] == "state.version"])
        assert actions[0]["who"] == "admin" and actions[0]["why"] == "release with labels"
