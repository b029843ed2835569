"""Objects the simulated-cluster tests create: a ComputeDomain-shaped CRD, pods, nodes, DRA objects."""

from __future__ import annotations

from typing import Any

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
PLURAL = "computedomains"
DRIVER = "compute-domain.nvidia.com"


def compute_domain_crd() -> dict[str, Any]:
    """A CRD with the ComputeDomain's shape: status subresource, defaults, immutable spec."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": "computedomain",
                "kind": "ComputeDomain",
                "listKind": "ComputeDomainList",
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "required": ["channel"],
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self == oldSelf",
                                            "message": "A computeDomain.spec is immutable",
                                        }
                                    ],
                                    "properties": {
                                        "numNodes": {"type": "integer", "default": 0, "minimum": 0},
                                        "channel": {
                                            "type": "object",
                                            "required": ["resourceClaimTemplate"],
                                            "properties": {
                                                "resourceClaimTemplate": {
                                                    "type": "object",
                                                    "required": ["name"],
                                                    "properties": {"name": {"type": "string"}},
                                                },
                                                "allocationMode": {
                                                    "type": "string",
                                                    "enum": ["All", "Single"],
                                                    "default": "Single",
                                                },
                                            },
                                        },
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "status": {
                                            "type": "string",
                                            "enum": ["Ready", "NotReady"],
                                            "default": "NotReady",
                                        },
                                        "nodes": {"type": "array", "items": {"type": "object"}},
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def compute_domain(name: str, template: str = "channel-template", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"channel": {"resourceClaimTemplate": {"name": template}}},
    }


def pod(name: str, node: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
