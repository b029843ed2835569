"""`cdctl probe`: check that the components answer over HTTP; what the chart's `helm test` pod runs.

    cdctl probe --get http://cdctl-controller:8080/healthz --min-addresses 2 \
                --metrics http://cdctl-controller:8080/metrics --expect cdctl_build_info --expect cdctl_leader

Each URL's host is resolved to every address it has (a headless Service names one per pod), and every address
is asked: `--get` URLs must answer 2xx; `--metrics` URLs must answer 2xx with a Prometheus exposition that
declares every `--expect` metric family. A host with fewer addresses than `--min-addresses` fails (so a
controller replica that is not running fails the test). One line per address; exit 0 when all passed, 1
otherwise, 2 on bad input. Registered in cdctl.cli.main; tests/chart/test_helm_test.py runs the chart's test
pod's own arguments against a running controller and plugin.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import click

TIMEOUT_S = 10.0
Resolve = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> "address:port" of each endpoint


@dataclass(frozen=True)
class Check:
    url: str
    endpoint: str  # the address:port asked ("" when the host resolved to nothing)
    ok: bool
    detail: str


async def resolve_all(host: str, port: int) -> list[str]:
    """Every address the host resolves to (each pod behind a headless Service), as address:port."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = sorted({str(info[4][0]) for info in infos})
    return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses]


def declared_families(exposition: str) -> set[str]:
    """The metric families a text exposition declares (`# TYPE` lines)."""
    return set(re.findall(r"^# TYPE (\S+) \S+$", exposition, flags=re.MULTILINE))


async def _ask(http: aiohttp.ClientSession, url: str, endpoint: str, expect: Sequence[str]) -> Check:
    parts = urlsplit(url)
    target = parts._replace(netloc=endpoint).geturl()
    try:
        async with http.get(target, headers={"Host": parts.netloc}) as response:
            body = await response.text()
            if response.status // 100 != 2:
                return Check(url, endpoint, False, f"HTTP {response.status}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Check(url, endpoint, False, f"no answer: {exc or type(exc).__name__}")
    missing = sorted(set(expect) - declared_families(body))
    if missing:
        return Check(url, endpoint, False, f"missing metrics: {', '.join(missing)}")
    return Check(url, endpoint, True, f"{len(expect)} expected metrics" if expect else "ok")


async def probe(
    gets: Sequence[str],
    metrics: Sequence[str],
    expect: Sequence[str],
    min_addresses: int,
    resolve: Resolve = resolve_all,
) -> list[Check]:
    """Ask every address of every URL; one Check each (and one for a host short of `min_addresses`)."""
    checks: list[Check] = []
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for url, wanted in [*((u, ()) for u in gets), *((u, tuple(expect)) for u in metrics)]:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise click.BadParameter(f"{url!r}: want http://host:port/path", param_hint="URL")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                endpoints = await resolve(parts.hostname, port)
            except OSError as exc:
                checks.append(Check(url, "", False, f"cannot resolve {parts.hostname}: {exc}"))
                continue
            if len(endpoints) < min_addresses:
                found = f"{len(endpoints)} address(es)"
                checks.append(Check(url, "", False, f"{found}, at least {min_addresses} wanted"))
            checks.extend(await asyncio.gather(*(_ask(http, url, e, wanted) for e in endpoints)))
    return checks


@click.command("probe")
@click.option("--get", "gets", multiple=True, metavar="URL", help="Must answer 2xx at every address.")
@click.option("--metrics", multiple=True, metavar="URL", help="Must answer 2xx with every --expect metric.")
@click.option(
    "--expect", multiple=True, metavar="METRIC", help="A metric family each --metrics URL declares."
)
@click.option(
    "--min-addresses", type=click.IntRange(min=0), default=1, show_default=True,
    help="Fewest addresses each URL's host must resolve to (pods behind a headless Service).",
)  # fmt: skip
def probe_command(
    gets: tuple[str, ...], metrics: tuple[str, ...], expect: tuple[str, ...], min_addresses: int
) -> None:
    """Check that components answer over HTTP (what `helm test` runs)."""
    if not gets and not metrics:
        raise click.UsageError("name at least one --get or --metrics URL")
    checks = asyncio.run(probe(gets, metrics, expect, min_addresses))
    for check in checks:
        where = f" at {check.endpoint}" if check.endpoint else ""
        click.echo(f"{'ok  ' if check.ok else 'FAIL'} {check.url}{where}: {check.detail}")
    if not all(check.ok for check in checks):
        sys.exit(1)
