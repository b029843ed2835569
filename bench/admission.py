"""What the chart's claim admission policy costs the simulated API server per ResourceClaim create.

Creates N channel claims (v1, one compute-domain.nvidia.com config each) in the simulated API server's object
store, in process, three ways: with no admission policy, with the chart's policies (as
cdctl/sim/rack/chart.py renders them for the default values, so the claim policy judges every claim), and
with them for claims written in v1beta1 (judged in that version, so converted for the policy). Also times a
claim of another driver, which the policy's matchCondition skips. Prints the mean and p99 per create and the
policy's share, and writes bench/results/admission-<UTC time>.json. A real API server evaluates the same CEL
in Go; this measures the simulator (the `cel` module), which the rack and the tests pay.

    .venv/bin/python bench/admission.py [--claims 2000]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdctl.sim.apiserver.conversion import convert
from cdctl.sim.apiserver.identity import service_account_token, user_for_token
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.rack.chart import admission_policies

RESULTS = Path(__file__).resolve().parent / "results"
NS = "team-a"
TENANT = user_for_token(service_account_token(NS, "trainer"))


def _claim(index: int, driver: str = "compute-domain.nvidia.com") -> dict[str, Any]:
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": "6f1b2c3d-0000-4000-8000-000000000001",
        "allocationMode": "Single",
    }
    return {
        "metadata": {"name": f"claim-{index}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                    }
                ],
                "config": [{"requests": ["channel"], "opaque": {"driver": driver, "parameters": parameters}}],
            }
        },
    }


def _store(with_policies: bool) -> ObjectStore:
    store = ObjectStore()
    store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": NS}})
    if with_policies:
        objects = admission_policies({}, namespace="cdctl-system")
        for obj in sorted(objects, key=lambda o: o["kind"] != "ValidatingAdmissionPolicy"):
            plural = (
                "validatingadmissionpolicies"
                if obj["kind"].endswith("Policy")
                else "validatingadmissionpolicybindings"
            )
            store.create(store.type_of("admissionregistration.k8s.io", plural), "", obj)
    return store


def _run(
    claims: int, with_policies: bool, version: str = "v1", driver: str = "compute-domain.nvidia.com"
) -> list[float]:
    store = _store(with_policies)
    storage = store.type_of("resource.k8s.io", "resourceclaims")
    served = store.registry.get("resource.k8s.io", version, "resourceclaims")
    bodies = []
    for index in range(claims):
        body = _claim(index, driver)
        if version != "v1":  # what the client sends, then what the HTTP handler stores
            body = convert(convert(body, storage, served), served, storage)
        bodies.append(body)
    times: list[float] = []
    for body in bodies:
        started = time.perf_counter()
        store.create(storage, NS, copy.deepcopy(body), user=TENANT, served=served)
        times.append(time.perf_counter() - started)
    if with_policies and driver == "compute-domain.nvidia.com":
        assert store.policies.admitted[("claims-policy-cdctl", TENANT.username)] == claims
    return times


def _figures(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "mean_us": statistics.fmean(times) * 1e6,
        "p50_us": ordered[len(ordered) // 2] * 1e6,
        "p99_us": ordered[int(len(ordered) * 0.99) - 1] * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=2000)
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs: dict[str, Callable[[], list[float]]] = {
        "no policy": lambda: _run(args.claims, False),
        "chart policies, v1": lambda: _run(args.claims, True),
        "chart policies, v1beta1": lambda: _run(args.claims, True, "v1beta1"),
        "chart policies, other driver": lambda: _run(args.claims, True, driver="gpu.nvidia.com"),
    }
    results = {name: _figures(run()) for name, run in runs.items()}
    base = results["no policy"]["mean_us"]
    print(f"{args.claims} ResourceClaim creates in the simulated API server's store (in process):")
    for name, figures in results.items():
        extra = figures["mean_us"] - base
        print(
            f"  {name:30} mean {figures['mean_us']:8.1f} us  p50 {figures['p50_us']:8.1f} us  "
            f"p99 {figures['p99_us']:8.1f} us  (+{extra:7.1f} us over no policy)"
        )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"admission-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "claims": args.claims,
                "results": results,
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "load_average": {"before": load_before, "after": os.getloadavg()},
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
