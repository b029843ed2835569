"""The controller's /metrics against docs/metrics.md: the same metrics with the same types and labels, the
default registry's process and Python metrics, build info, leadership, the event log's size, append latency
and projection lag, and no `_created` series.

A real controller (with a log file and its HTTP endpoint) runs against the simulated API server and is scraped
over HTTP after it reconciled a domain.
"""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from cdctl import __version__
from tests.controller.harness import Cluster, eventually_async
from tests.docs.metricsdocs import documented, documented_for, exposed, exposed_labels


def value(scrape: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", scrape, re.MULTILINE)
    assert match, f"no series {series}"
    return float(match.group(1))


async def scrape(port: int) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as got:
        assert got.status == 200
        return await got.text()


async def test_the_controller_serves_exactly_the_documented_metrics(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(
            db_path=str(tmp_path / "c.db"), http_endpoint="127.0.0.1:0"
        )
        cluster.create_domain("train", num_nodes=0)  # Ready at once: no daemons to wait for
        cluster.create_domain("waiting", num_nodes=2)
        assert manager.http is not None
        port = manager.http.port

        async def reconciled() -> str | None:
            text = await scrape(port)
            formed = "cdctl_controller_domain_formation_seconds_count 1.0" in text
            return text if formed and 'cdctl_domain_not_ready{domain_name="waiting"' in text else None

        text = await eventually_async(reconciled)

    assert exposed(text) == documented_for("controller")
    for metric in documented():
        labels = exposed_labels(text, metric.name)
        if labels:  # a labelled family with no child yet has no samples to read
            assert labels == metric.labels, metric.name
    assert "_created" not in text
    assert value(text, "cdctl_leader") == 1
    assert f'version="{__version__}"' in text and 'component="controller"' in text
    head = value(text, "cdctl_event_log_head_position")
    assert head > 0 and value(text, "cdctl_event_log_events") == head
    assert value(text, "cdctl_event_log_size_bytes") >= (tmp_path / "c.db").stat().st_size
    assert value(text, "cdctl_event_log_append_duration_seconds_count") > 0
    assert 0 <= value(text, 'cdctl_projection_lag_events{projection="domain_history"}') <= head
    assert value(text, 'nvidia_dra_compute_domain_info{status="Ready"}') == 1
    assert value(text, "cdctl_controller_domain_formation_seconds_count") == 1
    assert 'cdctl_domain_not_ready{domain_name="waiting",domain_namespace="team-a"} 1.0' in text
    assert 'cdctl_domain_not_ready{domain_name="train"' not in text
    assert value(text, "process_resident_memory_bytes") > 0
