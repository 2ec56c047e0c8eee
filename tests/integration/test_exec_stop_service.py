"""``guardian exec stop --url ... --execution N`` stops a controller's execution through its API.

Goal: an operator stops a running execution from the command line as from the dashboard: the state records
``stopping`` (with rollback when asked), the action log records who and why, a viewer token is refused, a
finished execution is reported as such, and a follower's 307 to the leader is followed for the POST.
Method: the real app served by uvicorn on loopback over a local store; the CLI through ``CliRunner``; a
stdlib HTTP server answering every request with a 307 to the app plays the follower. Cost: ~2 s.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controlplane.api.app import create_app
from controlplane.cli.app import app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from controlplane.state.store import LocalStateStore
from tests.integration.test_api_execution_views import running_execution
from tests.support.service_support import served_app

pytestmark = pytest.mark.timeout(60)
OPERATOR, VIEWER = "stop-operator-token-0123", "stop-viewer-token-0123"


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, ServiceContext]]:
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path, tokens=[
        TokenConf(name="olga", role="operator", sha256=hash_token(OPERATOR)),
        TokenConf(name="vera", role="viewer", sha256=hash_token(VIEWER))]), store=LocalStateStore())
    with served_app(create_app(ctx)) as url:
        yield url, ctx


def execution(ctx: ServiceContext, eid: int) -> dict:
    return dict(ctx.store.read(lambda s: dict(s["executions"][str(eid)])))


def test_stop_with_rollback_by_id_is_recorded_with_who_and_why(served: tuple[str, ServiceContext]) -> None:
    url, ctx = served
    eid = running_execution(ctx)
    done = CliRunner().invoke(app, ["exec", "stop", "--url", url, "--token", OPERATOR, "--execution", str(eid),
                                    "--rollback", "--reason", "disk 3 of broker 2 is failing"])
    assert done.exit_code == 0, done.output
    assert f"execution {eid}: stop with rollback recorded" in done.stdout
    got = execution(ctx, eid)
    assert got["status"] == "stopping" and got["rollback"] is True
    action = ctx.store.read(lambda s: [a for a in s["actions"] if a["type"] == "execution.stop"][-1])
    assert action["who"] == "olga" and action["why"] == "disk 3 of broker 2 is failing"
    again = CliRunner().invoke(app, ["exec", "stop", "--url", url, "--token", OPERATOR, "--execution", str(eid)])
    assert again.exit_code == 0 and "stop with rollback recorded" in again.stdout  # still stopping: rollback kept


def test_stop_without_an_id_takes_the_one_running_and_without_rollback_keeps_moves(
        served: tuple[str, ServiceContext]) -> None:
    url, ctx = served
    eid = running_execution(ctx)
    done = CliRunner().invoke(app, ["exec", "stop", "--url", url, "--token", OPERATOR, "--cluster", "c1"])
    assert done.exit_code == 0, done.output
    got = execution(ctx, eid)
    assert got["status"] == "stopping" and got["rollback"] is False
    none = CliRunner().invoke(app, ["exec", "stop", "--url", url, "--token", OPERATOR, "--cluster", "nope"])
    assert none.exit_code == 2 and "give --execution: 0 execution(s) running on nope" in none.output


def test_a_viewer_is_refused_and_an_unknown_id_is_named(served: tuple[str, ServiceContext]) -> None:
    url, ctx = served
    eid = running_execution(ctx)
    viewer = CliRunner().invoke(app, ["exec", "stop", "--url", url, "--token", VIEWER, "--execution", str(eid)])
    assert viewer.exit_code == 1 and "HTTP 403" in viewer.output and "needs operator" in viewer.output
    assert execution(ctx, eid)["status"] == "running"
    unknown = CliRunner().invoke(app, ["exec", "stop", "--url", url, "--token", OPERATOR, "--execution", "999"])
    assert unknown.exit_code == 1 and "HTTP 404" in unknown.output
    local_with_id = CliRunner().invoke(app, ["exec", "stop", "--execution", str(eid)])
    assert local_with_id.exit_code == 2 and "--execution needs --url" in local_with_id.output


def test_a_follower_s_redirect_is_followed_for_the_stop(served: tuple[str, ServiceContext]) -> None:
    url, ctx = served
    eid = running_execution(ctx)

    class Follower(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", url + self.path)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    follower = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Follower)
    threading.Thread(target=follower.serve_forever, daemon=True).start()
    try:
        done = CliRunner().invoke(app, ["exec", "stop", "--url", f"http://127.0.0.1:{follower.server_port}",
                                        "--token", OPERATOR, "--execution", str(eid)])
    finally:
        follower.shutdown()
    assert done.exit_code == 0, done.output
    assert execution(ctx, eid)["status"] == "stopping"
