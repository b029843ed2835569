"""Helpers for stand-in tests: write DRA objects straight into an ObjectStore (v1 shapes)."""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.store import ObjectStore

DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"


def kind(store: ObjectStore, group: str, plural: str) -> Any:
    return store.type_of(group, plural)


def add_node(
    store: ObjectStore, name: str, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return store.create(
        kind(store, "", "nodes"), "", {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}
    )


def add_slice(
    store: ObjectStore, node: str, driver: str = DRIVER, devices: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The node's slice: `devices` (v1 shape), by default channel-0 and daemon-0."""
    devices = devices or [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]
    body = {
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    return store.create(kind(store, "resource.k8s.io", "resourceslices"), "", body)


def add_classes(store: ObjectStore, *, with_config: bool = True) -> None:
    """NVIDIA's two DeviceClasses; `with_config` adds an opaque class config (to see it reach allocations)."""
    classes = kind(store, "resource.k8s.io", "deviceclasses")
    for name, device_type, extra in (
        (CHANNEL_CLASS, "channel", f" && device.attributes['{DRIVER}'].id == 0"),
        (DAEMON_CLASS, "daemon", ""),
    ):
        expression = (
            f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'{extra}"
        )
        store.create(
            classes,
            "",
            {
                "metadata": {"name": name},
                "spec": {
                    "selectors": [{"cel": {"expression": expression}}],
                    "config": [{"opaque": {"driver": DRIVER, "parameters": {"fromClass": name}}}]
                    if with_config
                    else [],
                },
            },
        )


def add_template(
    store: ObjectStore,
    name: str,
    device_class: str = CHANNEL_CLASS,
    namespace: str = "default",
    request: str = "channel",
    **exactly: Any,
) -> dict[str, Any]:
    body = {
        "metadata": {"name": name},
        "spec": {
            "metadata": {"labels": {"from-template": name}},
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class, **exactly}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": DRIVER, "parameters": {"domainID": "d1"}},
                        }
                    ],
                }
            },
        },
    }
    return store.create(kind(store, "resource.k8s.io", "resourceclaimtemplates"), namespace, body)


def add_pod(
    store: ObjectStore,
    name: str,
    template: str | None = None,
    *,
    claim: str | None = None,
    namespace: str = "default",
    node: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if template:
        spec["resourceClaims"] = [{"name": "channel", "resourceClaimTemplateName": template}]
    if claim:
        spec["resourceClaims"] = [{"name": "channel", "resourceClaimName": claim}]
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    return store.create(kind(store, "", "pods"), namespace, {"metadata": {"name": name}, "spec": spec})


def get(store: ObjectStore, group: str, plural: str, name: str, namespace: str = "default") -> dict[str, Any]:
    return store.get(kind(store, group, plural), namespace, name)


def claims(store: ObjectStore, namespace: str = "default") -> list[dict[str, Any]]:
    items, _ = store.list_objects(kind(store, "resource.k8s.io", "resourceclaims"), namespace)
    return items
