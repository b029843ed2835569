"""The verbosity ladder (docs/logging.md): at each level 0..7 the lines that level promises appear and none
of a higher rung does; JSON keeps the traceback in an `exception` field; console tracebacks show no locals
unless CDCTL_LOG_LOCALS asks. Real code paths: a Prepare and an Unprepare on a plugin node, an informer and
API requests against the simulated API server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import structlog

from cdctl.api import verbosity
from cdctl.cli.logs import configure_logging
from cdctl.k8s.informer import Informer, Observation, Synced
from cdctl.k8s.resources import NODES
from cdctl.k8s.rest import REDACTED, KubeApi, _shown_body
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.sim.apiserver.server import ApiServer
from tests.plugin.conftest import Node
from tests.plugin.fakes import DOM1, channel_claim

# Each kind of line and the rung that adds it.
RUNGS = {
    "prepared claim": 0,
    "unprepared claim": 0,
    "prepare decision: prepare": 2,
    "prepare decision: already prepared, answering from the event log": 2,
    "unprepare decision: never prepared here; recorded, to fence a prepare in flight": 2,
    "watch event": 4,
    "api request": 6,
    "api watch": 6,
    "api request bodies": 7,
}


pytestmark = pytest.mark.usefixtures("restore_logging")


async def scenario(node: Node, api: KubeApi, level: int) -> None:
    """One prepared claim (twice), one Unprepare of a claim never prepared, and one node seen by a watch."""
    node.cluster.ready.add((DOM1, "node-a"))
    claim = parse_claim(channel_claim(f"c{level}", DOM1))
    await node.state.prepare(claim, node.state.book.version(claim.ref.uid))
    await node.state.prepare(claim, node.state.book.version(claim.ref.uid))
    await node.state.unprepare(ClaimRef(f"u{level}", "default", "never"))
    await node.state.unprepare(claim.ref)
    informer = Informer(api, NODES, field_selector=f"metadata.name=n{level}")
    seen = informer.observe()
    async with asyncio.timeout(20):
        assert isinstance(await anext(seen), Synced)
        await api.create(
            "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{level}"}}
        )
        item = await anext(seen)
    assert isinstance(item, Observation) and item.name == f"n{level}"
    await seen.aclose()


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_each_level_adds_what_it_promises_and_nothing_below_does(
    node: Node, env: tuple[ApiServer, KubeApi, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, api, _ = env
    for level in range(8):
        configure_logging("json", level)
        capsys.readouterr()
        await scenario(node, api, level)
        events = {str(e["event"]) for e in lines(capsys.readouterr().err)}
        for kind, rung in RUNGS.items():
            assert (kind in events) == (rung <= level), (level, kind, sorted(events))
        assert all("v" not in e for e in lines(capsys.readouterr().err))  # the rung key is not printed


async def test_request_bodies_hold_no_credentials() -> None:
    assert _shown_body("/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {"token": "t0k"}}) == REDACTED
    assert _shown_body("/api/v1/namespaces/x/secrets/key", b'{"data":{"key":"c2VjcmV0"}}') == REDACTED
    assert _shown_body("/api/v1/namespaces/x/serviceaccounts/sa/token", {"spec": {}}) == REDACTED
    assert _shown_body("/api/v1/nodes/n1", {"metadata": {"name": "n1"}}) == '{"metadata":{"name":"n1"}}'
    assert _shown_body("/api/v1/nodes", b"x" * 5000).endswith("...(truncated)")


def _fail_with_a_secret_in_scope() -> None:
    secret_token = "hunter2-token"  # noqa: F841 - a local a traceback with locals would print
    raise RuntimeError("boom")


def test_json_lines_keep_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", 0)
    try:
        _fail_with_a_secret_in_scope()
    except RuntimeError:
        structlog.get_logger("t").exception("it failed")
    (line,) = lines(capsys.readouterr().err)
    stack = str(line["exception"])
    assert "Traceback (most recent call last)" in stack and 'raise RuntimeError("boom")' in stack
    assert "_fail_with_a_secret_in_scope" in stack and "hunter2-token" not in stack


@pytest.mark.parametrize("asked", [False, True])
def test_console_tracebacks_show_locals_only_when_asked(
    asked: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDCTL_LOG_LOCALS", "true" if asked else "")
    configure_logging("console", 0)
    try:
        _fail_with_a_secret_in_scope()
    except RuntimeError:
        structlog.get_logger("t").exception("it failed")
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "boom" in err
    assert ("hunter2-token" in err) is asked


def test_a_process_that_never_configures_logging_filters_and_hides_locals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A short CLI command (or anything importing the Kubernetes client) gets the default rung and plain
    tracebacks without calling configure_logging."""
    structlog.reset_defaults()
    verbosity.install_default_filter()
    log = structlog.get_logger("t")
    log.info("a request line", v=verbosity.V_REQUEST)
    log.info("a decision line", v=verbosity.V_DECISION)
    try:
        _fail_with_a_secret_in_scope()
    except RuntimeError:
        log.exception("it failed")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "a decision line" in text and "a request line" not in text
    assert "boom" in text and "hunter2-token" not in text
