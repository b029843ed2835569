"""The chart's ValidatingAdmissionPolicies on the real API server refuse what the simulator's tests have them
refuse: every claim config the plugin's Prepare would refuse, in the plugin's words (the cases of
tests/chart/test_claim_admission.py), and a compromised plugin's writes to another node, its own node's
other fields, or slices not its own (the cases of tests/plugin/test_chart_policies.py). Good configs pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.chart.claimadmission import TENANT_NS, claim, template
from tests.chart.test_claim_admission import ACCEPTED, REFUSED
from tests.plugin.test_chart_policies import TAINT, a_slice
from tests.real.kit import BIN, run
from tests.real.rack import RealRack, RealSettings

DENIED = "ValidatingAdmissionPolicy"


async def as_user(kubeconfig: Path, *args: str, stdin: str | None = None) -> tuple[int, str]:
    return await run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
                     stdin=stdin.encode() if stdin is not None else None)  # fmt: skip


async def dry_run_create(rack: RealRack, body: dict[str, Any]) -> tuple[int, str]:
    """The admin's server-side dry run of a create: admission runs, nothing is stored."""
    return await as_user(
        rack.plane.kubeconfig, "create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(body)
    )


async def test_the_chart_policies_refuse_on_the_real_server_what_they_refuse_in_the_simulator(
    work_dir: Path,
) -> None:
    async with RealRack(work_dir, RealSettings(nodes=2)) as rack:
        await rack.plane.kubectl("create", "namespace", TENANT_NS)
        failures: list[str] = []
        for case, parameters, words in REFUSED:
            for body in (claim(parameters), template(parameters)):
                code, output = await dry_run_create(rack, body)
                if code == 0 or DENIED not in output or words not in output:
                    failures.append(f"{case} ({body['kind']}): {code} {output.strip()[:300]}")
        for body in (claim(["x"]), template(["x"])):  # the server's own validation refuses it first
            code, output = await dry_run_create(rack, body)
            if (
                code == 0
                or "opaque.parameters: Invalid value" not in output
                or "must be a valid JSON object" not in output
            ):
                failures.append(f"parameters not an object ({body['kind']}): {code} {output.strip()[:300]}")
        for parameters in ACCEPTED:
            code, output = await dry_run_create(rack, claim(parameters))
            if code != 0:
                failures.append(f"accepted config {parameters}: {output.strip()[:300]}")
        assert not failures, "\n".join(failures)

        own, other = rack.nodes
        plugin = rack._pod_kubeconfigs[(await rack.plugin_pod(own))["metadata"]["uid"]]
        cordon = ("--type=merge", "-p", '{"spec":{"unschedulable":true}}')
        attacks = {
            "cordon another node": ("patch", "node", other, *cordon),
            "taint another node": ("patch", "node", other, "--type=merge", "-p", yaml.safe_dump(TAINT)),
            "label another node": ("label", "node", other, "resource.nvidia.com/computeDomain=x"),
            "cordon its own node": ("patch", "node", own, *cordon),
            "relabel its own clique": ("label", "--overwrite", "node", own, "nvidia.com/gpu.clique=c.2"),
            "annotate its own node": ("annotate", "node", own, "a=b"),
        }  # fmt: skip
        for what, args in attacks.items():
            code, output = await as_user(plugin, *args)
            assert code != 0 and (DENIED in output or "forbidden" in output), f"{what}: {output}"
        code, output = await as_user(plugin, "label", "node", own, "resource.nvidia.com/computeDomain=x")
        assert code == 0, f"the plugin sets its own node's ComputeDomain label: {output}"
        for what, body in {
            "another node's slice": a_slice("n1-other", other),
            "another driver's slice": a_slice("n0-gpu", own, driver="gpu.nvidia.com"),
        }.items():
            code, output = await as_user(plugin, "create", "-f", "-", stdin=yaml.safe_dump(body))
            assert code != 0 and DENIED in output, f"{what}: {output}"
