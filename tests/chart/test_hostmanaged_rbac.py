"""Under featureGates.HostManagedIMEX=true the controller watches only what the chart's RBAC grants it there.

The chart drops the controller's Node, Pod, DaemonSet and ComputeDomainClique grants in host-managed mode;
a controller that still watched them would never finish its first sync on a real cluster. Each informer the
controller builds under the gate (cdctl.controller.manager) must be granted list and watch, and the writes of
its add and delete paths (finalizers, status, the workload template) must be granted too.
"""

from __future__ import annotations

from typing import Any, cast

from cdctl.api.gates import parse_feature_gates
from cdctl.controller.manager import ControllerManager
from cdctl.controller.settings import ControllerSettings
from cdctl.k8s.rest import KubeApi
from tests.chart.test_rbac import CONTROLLER, _grants


def test_every_watch_and_write_of_the_host_managed_controller_is_granted(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    granted = _grants(rendered["host-managed"])[CONTROLLER]
    settings = ControllerSettings(
        pod_name="controller-0",
        image_name="example.com/cdctl:test",
        log_verbosity_cd_daemon=4,
        feature_gates=parse_feature_gates("HostManagedIMEX=true"),
    )
    manager = ControllerManager(settings, cast(KubeApi, object()), None, "v1")  # built, never run
    watched = {(informer.resource.group, informer.resource.plural) for informer in manager.informers}
    assert watched == {
        ("resource.nvidia.com", "computedomains"),
        ("resource.k8s.io", "resourceclaimtemplates"),
    }
    for group, plural in watched:
        assert {"list", "watch"} <= granted[("*", group, plural)], plural
    assert "update" in granted[("*", "resource.nvidia.com", "computedomains")]  # the finalizer
    assert "update" in granted[("*", "resource.nvidia.com", "computedomains/status")]  # status Ready
    assert {"create", "update", "delete"} <= granted[("*", "resource.k8s.io", "resourceclaimtemplates")]
