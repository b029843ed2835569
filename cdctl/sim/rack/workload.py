"""The objects a user submits in the seeds' examples: a ComputeDomain and a multi-node job using its channel.

`compute_domain(name, namespace, num_nodes)` is the ComputeDomain whose workload ResourceClaimTemplate is
`<name>-channel`; `worker_job(name, namespace, workers, template)` is an Indexed batch/v1 Job of `workers`
pods, each asking for 4 `nvidia.com/gpu` (so one pod per GB200 node), constrained by required pod affinity
on `nvidia.com/gpu.clique` to one NVLink clique, and claiming one IMEX channel from the template, as in the
seeds' MPIJob workers (`gpus_per_pod=1`: single-GPU pods, several on a node). Where the rack runs workers
(channel isolation), each container is `imex-memcheck worker` (cdctl.sim.node.fakeimexmem): it exports a
buffer under `<namespace>/<pod>` on the channel it was given, for its peers to import, and is Ready once it
has (its startup probe). It runs as root, as the nvbandwidth image does. Used by cdctl.sim.rack.scenario,
the integration tests and the benchmarks.
"""

from __future__ import annotations

from typing import Any

from cdctl.sim.node.fakeimexmem import EXECUTABLE as MEMCHECK
from cdctl.sim.node.topology import GPUS_PER_NODE
from cdctl.sim.rack.launch import CLIQUE_LABEL, GPU_RESOURCE

CHANNEL_CLAIM = "imex-channel-0"
WORKER_APP_LABEL = "app"


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def export_name(namespace: str, pod: str) -> str:
    """What a worker exports its buffer under (imex-memcheck's default: `$POD_NAMESPACE/$POD_NAME`)."""
    return f"{namespace}/{pod}"


def channel_template_name(domain: str) -> str:
    return f"{domain}-channel"


def compute_domain(name: str, namespace: str, num_nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": channel_template_name(name)}},
        },
    }


def worker_job(
    name: str,
    namespace: str,
    workers: int,
    template: str,
    gpus_per_pod: int = GPUS_PER_NODE,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    app = f"{name}-worker"
    same_clique = {
        "labelSelector": {"matchExpressions": [{"key": WORKER_APP_LABEL, "operator": "In", "values": [app]}]},
        "topologyKey": CLIQUE_LABEL,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "completions": workers,
            "parallelism": workers,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": {WORKER_APP_LABEL: app}},
                "spec": {
                    "restartPolicy": "Never",
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": {
                        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [same_clique]}
                    },
                    "containers": [
                        {
                            "name": "nvbandwidth",
                            "image": "ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163",
                            "command": [MEMCHECK, "worker"],
                            "env": [
                                _field_env("POD_NAME", "metadata.name"),
                                _field_env("POD_NAMESPACE", "metadata.namespace"),
                            ],
                            "securityContext": {"runAsUser": 0},
                            # Ready once its buffer is exported; a startup probe alone stops once it passes.
                            "startupProbe": {
                                "exec": {"command": [MEMCHECK, "exported"]},
                                "periodSeconds": 1,
                                "failureThreshold": 60,
                            },
                            "resources": {
                                "limits": {GPU_RESOURCE: gpus_per_pod},
                                "claims": [{"name": CHANNEL_CLAIM}],
                            },
                        }
                    ],
                    "resourceClaims": [{"name": CHANNEL_CLAIM, "resourceClaimTemplateName": template}],
                },
            },
        },
    }
