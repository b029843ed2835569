"""A real OTLP/HTTP logs receiver for tests: an aiohttp server on loopback that decodes each
ExportLogsServiceRequest (opentelemetry-proto) into (resource attributes, record attributes, body); with
`stuck` set it holds every request until `release` is set. Used by tests/store/test_otlp.py and the rack's
export test (tests/integration/test_otlp_rack.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)


@dataclass
class Receiver:
    """An OTLP/HTTP logs endpoint: decodes each request; with `stuck` set, holds requests until released."""

    url: str = ""
    records: list[tuple[dict[str, Any], dict[str, Any], str]] = field(default_factory=list)
    stuck: bool = False
    held: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        body = ExportLogsServiceRequest.FromString(await request.read())
        if self.stuck:
            self.held += 1
            await self.release.wait()
            return web.Response(status=503)
        for resource_logs in body.resource_logs:
            resource = {kv.key: _value(kv.value) for kv in resource_logs.resource.attributes}
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    attributes = {kv.key: _value(kv.value) for kv in record.attributes}
                    self.records.append((resource, attributes, record.body.string_value))
        reply = ExportLogsServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver()
    app = web.Application()
    app.router.add_post("/v1/logs", got.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    got.url = f"http://127.0.0.1:{port}"
    yield got
    got.release.set()
    await runner.cleanup()
