"""The rendered ResourceClaimTemplates and DaemonSet, field for field (reference section 2.3)."""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.api.configs import ChannelConfig, DaemonConfig, decode_config
from cdctl.api.gates import parse_feature_gates
from cdctl.controller.render import daemon_claim_template, daemon_set, workload_claim_template
from cdctl.controller.settings import ControllerSettings

UID = "0b5c7e1a-0000-4000-8000-000000000001"


def domain(allocation_mode: str | None = "All") -> dict[str, Any]:
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": "imex-channel"}}
    if allocation_mode is not None:
        channel["allocationMode"] = allocation_mode
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "team-a", "uid": UID},
        "spec": {"numNodes": 2, "channel": channel},
    }


def settings(**overrides: Any) -> ControllerSettings:
    base: dict[str, Any] = {
        "pod_name": "ctrl-0",
        "image_name": "example/cdctl:1",
        "log_verbosity_cd_daemon": 4,
    }
    base.update(overrides)
    return ControllerSettings(**base)


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_workload_template_matches_the_go_driver(version: str) -> None:
    rct = workload_claim_template(domain(), version)
    assert rct == {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "imex-channel",
            "namespace": "team-a",
            "finalizers": ["resource.nvidia.com/computeDomain"],
            "labels": {
                "resource.nvidia.com/computeDomain": UID,
                "resource.nvidia.com/computeDomainTarget": "Workload",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": UID,
                                    "allocationMode": "All",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def test_workload_template_for_v1beta1_has_flat_requests() -> None:
    rct = workload_claim_template(domain(), "v1beta1")
    assert rct["apiVersion"] == "resource.k8s.io/v1beta1"
    assert rct["spec"]["spec"]["devices"]["requests"] == [
        {"name": "channel", "deviceClassName": "compute-domain-default-channel.nvidia.com"}
    ]


def test_channel_parameters_pass_the_plugins_strict_decoder_and_omit_an_unset_mode() -> None:
    params = workload_claim_template(domain(None), "v1")["spec"]["spec"]["devices"]["config"][0]["opaque"]
    assert "allocationMode" not in params["parameters"]
    decoded = decode_config(params["parameters"], strict=True, obj="rct")
    assert decoded == ChannelConfig(domain_id=UID, allocation_mode="")


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_daemon_template_lives_beside_the_daemonset(version: str) -> None:
    rct = daemon_claim_template(domain(), "nvidia-dra", version)
    assert rct["apiVersion"] == f"resource.k8s.io/{version}"
    assert rct["metadata"] == {
        "name": f"computedomain-daemon-{UID}",
        "namespace": "nvidia-dra",
        "finalizers": ["resource.nvidia.com/computeDomain"],
        "labels": {
            "resource.nvidia.com/computeDomain": UID,
            "resource.nvidia.com/computeDomainTarget": "Daemon",
        },
    }
    devices = rct["spec"]["spec"]["devices"]
    request = devices["requests"][0]
    class_name = request["exactly"]["deviceClassName"] if version != "v1beta1" else request["deviceClassName"]
    assert request["name"] == "daemon"
    assert class_name == "compute-domain-daemon.nvidia.com"
    assert devices["config"][0]["requests"] == ["daemon"]
    assert devices["config"][0]["opaque"]["driver"] == "compute-domain.nvidia.com"
    assert decode_config(devices["config"][0]["opaque"]["parameters"], strict=True, obj="x") == DaemonConfig(
        UID
    )


def test_daemonset_has_every_field_of_the_reference() -> None:
    gates = parse_feature_gates("ComputeDomainCliques=true")
    ds = daemon_set(
        domain(),
        "nvidia-dra",
        settings(
            daemon_image_pull_secret_names=("pull-a", "pull-b"),
            feature_gates=gates,
            max_nodes_per_imex_domain=9,
        ),
    )
    label = {"resource.nvidia.com/computeDomain": UID}
    assert ds["apiVersion"] == "apps/v1"
    assert ds["metadata"] == {
        "name": f"computedomain-daemon-{UID}",
        "namespace": "nvidia-dra",
        "finalizers": ["resource.nvidia.com/computeDomain"],
        "labels": label,
    }
    assert "ownerReferences" not in ds["metadata"]
    assert ds["spec"]["selector"] == {"matchLabels": label}
    assert ds["spec"]["template"]["metadata"] == {"labels": label}
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "compute-domain-daemon-service-account"
    assert pod["imagePullSecrets"] == [{"name": "pull-a"}, {"name": "pull-b"}]
    assert pod["nodeSelector"] == label
    assert pod["tolerations"] == [
        {"operator": "Exists", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute"},
        {"operator": "Exists", "effect": "PreferNoSchedule"},
    ]
    assert pod["resourceClaims"] == [
        {"name": "compute-domain-daemon", "resourceClaimTemplateName": f"computedomain-daemon-{UID}"}
    ]
    assert "priorityClassName" not in pod
    (container,) = pod["containers"]
    assert container["name"] == "compute-domain-daemon"
    assert container["image"] == "example/cdctl:1"
    assert container["resources"] == {"claims": [{"name": "compute-domain-daemon"}]}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "LOG_VERBOSITY": "4",
        "LOG_FORMAT": "console",
        "MAX_NODES_PER_IMEX_DOMAIN": "9",
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "POD_UID": {"fieldRef": {"fieldPath": "metadata.uid"}},
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "NVIDIA_VISIBLE_DEVICES": "void",
        "FEATURE_GATES": gates.to_string(),
    }
    assert env["FEATURE_GATES"].endswith(",") and "ComputeDomainCliques=true," in env["FEATURE_GATES"]
    probes = {name: container[name] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {
        name: (p["periodSeconds"], p["timeoutSeconds"], p["failureThreshold"]) for name, p in probes.items()
    } == {
        "startupProbe": (1, 10, 1200),
        "livenessProbe": (60, 10, 20),
        "readinessProbe": (2, 10, 3),  # the Go driver's is (10, 10, 1): see cdctl.controller.render
    }
    assert all(p["exec"]["command"] == ["cdctl", "daemon", "check"] for p in probes.values())


def test_daemon_pods_run_as_root_whatever_the_images_user() -> None:
    """The image's user is 65532; the daemon writes /imexd and /etc/hosts, which are root's."""
    pod = daemon_set(domain(), "ns", settings())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "privileged": False,
        "allowPrivilegeEscalation": False,
    }


@pytest.mark.parametrize(("fmt", "verbosity"), [("json", 6), ("console", 0)])
def test_daemon_pods_log_as_the_controller_says(fmt: str, verbosity: int) -> None:
    """The controller hands its own log format and the daemon verbosity to the daemons (LOG_FORMAT and
    LOG_VERBOSITY, the environment `cdctl daemon run` reads)."""
    ds = daemon_set(domain(), "ns", settings(log_format=fmt, log_verbosity_cd_daemon=verbosity))
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["LOG_FORMAT"], env["LOG_VERBOSITY"]) == (fmt, str(verbosity))


def test_daemonset_without_pull_secrets_has_no_empty_list() -> None:
    pod = daemon_set(domain(), "ns", settings())["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in pod


def test_managed_namespaces_put_the_driver_namespace_first_without_duplicates() -> None:
    s = settings(namespace="drv", additional_namespaces=("a", "drv", "", "b", "a"))
    assert s.managed_namespaces == ("drv", "a", "b")
    assert s.driver_managed_daemons
    assert not settings(feature_gates=parse_feature_gates("HostManagedIMEX=true")).driver_managed_daemons
