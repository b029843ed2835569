"""`helm test` for real: the chart's test pod's own arguments, run by `cdctl probe` against a running
controller and a running kubelet plugin, with the Services' DNS names resolved to those processes (the one
thing a cluster does here that this machine cannot). A component that is down, or a resolved address that
does not answer, fails it; an address short of `--min-addresses` (a replica missing) fails it too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import pytest
from helm_python import chart as hc

from cdctl.cli.probe import Check, probe
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import one, render_objects
from tests.controller.harness import Cluster
from tests.plugin.conftest import env  # noqa: F401  (the plugin's simulated node, a fixture)
from tests.plugin.test_app import U, config, seed_claim, serving_plugin


def container_args(helm_chart: hc.Chart, name: str, values: dict[str, Any] | None = None) -> list[str]:
    pod = one(render_objects(helm_chart, values), "Pod", "cdctl-probe")
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == name]
    args: list[str] = container["args"]
    return args


async def run(args: list[str], endpoints: dict[str, list[str]]) -> list[Check]:
    """`cdctl probe ARGS` with each Service host resolved to `endpoints[host]`."""
    options: dict[str, list[str]] = {"--get": [], "--metrics": [], "--expect": [], "--min-addresses": []}
    for arg in args:
        flag, _, value = arg.partition("=")
        options[flag].append(value)

    async def resolve(host: str, _port: int) -> list[str]:
        return endpoints.get(host, [])

    [minimum] = options["--min-addresses"]
    return await probe(options["--get"], options["--metrics"], options["--expect"], int(minimum), resolve)


async def test_the_controller_container_passes_against_a_controller_and_fails_without_one(
    helm_chart: hc.Chart, tmp_path: Path
) -> None:
    args = container_args(helm_chart, "controller")
    host = "cdctl-controller.cdctl-system.svc"
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(
            db_path=str(tmp_path / "c.db"), http_endpoint="127.0.0.1:0"
        )
        assert manager.http is not None
        live = f"127.0.0.1:{manager.http.port}"
        checks = await run(args, {host: [live]})
        assert [c.url.rsplit("/", 1)[1] for c in checks] == ["healthz", "readyz", "metrics"]
        assert all(c.ok for c in checks), checks
        # Two replicas wanted, one answers and one does not.
        two = [a.replace("--min-addresses=1", "--min-addresses=2") for a in args]
        checks = await run(two, {host: [live, "127.0.0.1:1"]})
        assert [c.ok for c in checks if c.endpoint == live] == [True, True, True]
        assert [c.ok for c in checks if c.endpoint != live] == [False, False, False]
        assert not (await run(args, {host: []}))[0].ok  # no replica at all
        # A metric the controller does not serve.
        missing = await run([*args, "--expect=cdctl_no_such_metric"], {host: [live]})
        assert [c.detail for c in missing if not c.ok] == ["missing metrics: cdctl_no_such_metric"]


async def test_the_plugin_container_passes_against_a_plugin(
    helm_chart: hc.Chart,
    env: tuple[ApiServer, KubeApi, Path],  # noqa: F811
) -> None:
    _, api, base = env
    await seed_claim(api, f"{U}.7")
    args = container_args(helm_chart, "kubelet-plugins")
    host = "cdctl-kubelet-plugin.cdctl-system.svc"
    cfg = dataclasses.replace(config(base), http_endpoint="127.0.0.1:0")
    async with serving_plugin(cfg, api) as (process, _):
        assert process.http is not None
        checks = await run(args, {host: [f"127.0.0.1:{process.http.port}"]})
    assert len(checks) == 2 and all(c.ok for c in checks), checks


async def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(click.BadParameter, match="want http://host:port/path"):
        await probe(["cdctl-controller:8080/healthz"], [], [], 1)
