"""`made_as`: a found ResourceClaimTemplate is the domain's only if it is what the controller would create;
the domain's labels alone, another domain's channel, an extra request or a changed class are not."""

from __future__ import annotations

import copy
from typing import Any

from cdctl.controller import render
from cdctl.controller.resourceclaimtemplate import made_as
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN

CD = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "cd1", "namespace": "team-a", "uid": "u-1"},
    "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "cd1-channel"}}},
}


def desired() -> dict[str, Any]:
    return render.workload_claim_template(CD, "v1")


def test_what_the_controller_creates_is_its_own_also_as_the_api_server_defaults_it() -> None:
    ours = made_as(desired())
    assert ours(desired())
    served = desired()
    served["metadata"] |= {"uid": "x", "resourceVersion": "3", "creationTimestamp": "2026-11-25T06:00:00Z"}
    served["spec"]["spec"]["devices"]["requests"][0]["exactly"] |= {
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert ours(served)


def test_labels_alone_or_a_changed_spec_are_not_the_domains() -> None:
    ours = made_as(desired())
    unlabelled = desired()
    del unlabelled["metadata"]["labels"]
    assert not ours(unlabelled)
    other_domain = desired()
    other_domain["metadata"]["labels"][LABEL_COMPUTE_DOMAIN] = "u-2"
    assert not ours(other_domain)
    for change in (
        lambda s: s["devices"]["config"][0]["opaque"]["parameters"].update(domainID="u-2"),
        lambda s: s["devices"]["requests"].append({"name": "gpu", "exactly": {"deviceClassName": "gpu"}}),
        lambda s: s["devices"]["requests"][0]["exactly"].update(deviceClassName="gpu.nvidia.com"),
        lambda s: s["devices"]["requests"][0]["exactly"].update(adminAccess=True),
        lambda s: s["devices"]["requests"][0]["exactly"].update(count=4),
        lambda s: s["devices"].pop("config"),
    ):
        tampered = copy.deepcopy(desired())
        change(tampered["spec"]["spec"])
        assert not ours(tampered), tampered
