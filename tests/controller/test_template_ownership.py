"""`made_as`: a found ResourceClaimTemplate is the domain's only if it is what the controller would create;
the domain's labels alone, another domain's channel, an extra request or a changed class are not."""

from __future__ import annotations

import copy
from typing import Any

from cdctl.controller import render
from cdctl.controller.resourceclaimtemplate import made_as
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from tests import realanswers

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


def _domain_of(template: dict[str, Any]) -> dict[str, Any]:
    """The ComputeDomain a real server's template was made for, as far as the template tells."""
    parameters = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    name = template["metadata"]["name"].removesuffix("-channel")
    channel = {"resourceClaimTemplate": {"name": template["metadata"]["name"]}}
    if "allocationMode" in parameters:
        channel["allocationMode"] = parameters["allocationMode"]
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": name,
            "namespace": template["metadata"]["namespace"],
            "uid": parameters["domainID"],
        },
        "spec": {"numNodes": 0, "channel": channel},
    }


def test_every_template_a_real_api_server_answered_with_is_the_one_the_controller_made() -> None:
    """The real kube-apiserver v1.36 answers with `spec.metadata: {}` and the request defaults filled in; the
    controller once took its own daemon template for a tenant's and never formed a driver-managed domain."""
    templates = realanswers.objects("resourceclaimtemplates")
    targets = {t["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"] for t in templates}
    assert targets == {"Workload", "Daemon"}, "the recording holds both kinds of template"
    for served in templates:
        cd = _domain_of(served)
        if served["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"] == "Daemon":
            desired = render.daemon_claim_template(cd, served["metadata"]["namespace"], "v1")
        else:
            desired = render.workload_claim_template(cd, "v1")
        assert served["spec"]["metadata"] == {}
        assert made_as(desired)(served), served["metadata"]["name"]


def test_an_empty_field_is_neutral_either_way_but_a_filled_one_is_not() -> None:
    ours = made_as(desired())
    dropped = desired()
    dropped["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = []
    assert made_as(dropped)(desired()), "an empty list we send and the server drops is still ours"
    selector = {"selectors": [{"cel": {"expression": "true"}}]}
    for extra in (selector, {"tolerations": [{"operator": "Exists"}]}):
        tampered = desired()
        tampered["spec"]["spec"]["devices"]["requests"][0]["exactly"] |= extra
        assert not ours(tampered), extra
    labelled = desired()
    labelled["spec"]["metadata"] = {"labels": {"x": "y"}}
    assert not ours(labelled), "claims made from it would carry a label we did not ask for"
