"""``guardian exec watch --url`` follows a service's execution through its API with the same view the
local watch shows from a state file, until the execution ends; a service that cannot be read is an error."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controlplane.api.app import create_app
from controlplane.cli.app import app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from tests.integration.test_api_execution_views import running_execution
from tests.support.service_support import served_app

pytestmark = pytest.mark.timeout(60)
TOKEN = "watch-viewer-token-0123"


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, ServiceContext, Path]]:
    state = tmp_path / "state.json"
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path, tokens=[
        TokenConf(name="vera", role="viewer", sha256=hash_token(TOKEN))]), store=LocalStateStore(state))
    with served_app(create_app(ctx)) as url:
        yield url, ctx, state


def test_watch_follows_a_service_execution_with_the_local_view(served: tuple[str, ServiceContext, Path]) -> None:
    url, ctx, state = served
    eid = running_execution(ctx)
    runner = CliRunner()
    remote = runner.invoke(app, ["exec", "watch", "--url", url, "--token", TOKEN, "--once"])
    local = runner.invoke(app, ["exec", "watch", "--state-file", str(state), "--once"])
    assert remote.exit_code == 0, remote.output
    assert local.exit_code == 0, local.output
    assert remote.stdout == local.stdout  # the same line from the API as from the state file
    assert remote.stdout.startswith(f"execution {eid} running") and "4.1 GB/6.0 GB" in remote.stdout
    assert "rate 100.0 MB/s" in remote.stdout
    by_id = runner.invoke(app, ["exec", "watch", "--url", url, "--token", TOKEN, "--once", "--execution", str(eid),
                                "--cluster", "c1"])
    assert by_id.exit_code == 0 and by_id.stdout == remote.stdout

    def finish() -> None:
        time.sleep(1.5)
        ctx.store.propose({"type": "execution.tasks", "meta": meta("executor"), "execution_id": eid, "updates": [
            {"key": k, "state": "COMPLETED"} for k in ("t:1", "t:2")]})
        ctx.store.propose({"type": "execution.finish", "meta": meta("executor"), "execution_id": eid,
                           "status": "completed"})

    threading.Thread(target=finish, daemon=True).start()
    followed = runner.invoke(app, ["exec", "watch", "--url", url, "--token", TOKEN, "--interval", "0.2"])
    assert followed.exit_code == 0, followed.output
    lines = followed.stdout.strip().splitlines()
    assert len(lines) >= 3 and lines[0].startswith(f"execution {eid} running")
    assert lines[-1].startswith(f"execution {eid} completed") and "6.0 GB/6.0 GB" in lines[-1]


def test_watch_without_a_valid_token_is_an_error_naming_the_answer(served: tuple[str, ServiceContext, Path]) -> None:
    url, ctx, _ = served
    running_execution(ctx)
    result = CliRunner().invoke(app, ["exec", "watch", "--url", url, "--token", "wrong", "--once"])
    assert result.exit_code == 1 and "HTTP 401" in result.output
    nobody = CliRunner().invoke(app, ["exec", "watch", "--url", "http://127.0.0.1:9", "--once"])
    assert nobody.exit_code == 1 and "cannot reach" in nobody.output
