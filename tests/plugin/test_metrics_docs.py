"""The kubelet plugin's /metrics against docs/metrics.md: the same metrics with the same types and labels
(the Go plugin's `nvidia_dra_*`, the default registry's process and Python metrics, build info, the event
log's size, append latency and the lag of its read models), and no `_created` series.

The whole plugin process serves a prepare through its socket and is scraped over HTTP.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.server import ApiServer
from tests.controller.test_metrics_docs import scrape, value
from tests.docs.metricsdocs import documented, documented_for, exposed, exposed_labels
from tests.plugin.test_app import U, config, seed_claim, serving_plugin


async def test_the_plugin_serves_exactly_the_documented_metrics(env: tuple[ApiServer, KubeApi, Path]) -> None:
    _, api, base = env
    domain_uid, claim_uid = await seed_claim(api, f"{U}.7")
    cfg = dataclasses.replace(config(base), http_endpoint="127.0.0.1:0")
    async with serving_plugin(cfg, api, (domain_uid,)) as (process, stub):
        ref = v1.Claim(namespace="default", name="rc", uid=claim_uid)
        resp = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
        assert resp.claims[claim_uid].error == ""
        assert process.http is not None and process.runner is not None
        await process.runner.catch_up()
        text = await scrape(process.http.port)

    assert exposed(text) == documented_for("kubelet-plugin")
    for metric in documented():
        labels = exposed_labels(text, metric.name)
        if labels:
            assert labels == metric.labels, metric.name
    assert "_created" not in text
    assert 'component="kubelet-plugin"' in text
    head = value(text, "cdctl_event_log_head_position")
    assert head > 0 and value(text, "cdctl_event_log_events") == head
    assert value(text, "cdctl_event_log_append_duration_seconds_count") > 0
    for projection in ("claim_lifecycle", "channel_allocations", "checkpoint_transitions"):
        assert 0 <= value(text, f'cdctl_projection_lag_events{{projection="{projection}"}}') <= head
