"""The controller runs as a StatefulSet whose replicas each keep their event log on a PersistentVolumeClaim
(a volume claim template), governed by a headless Service; `controller.persistence.enabled=false` falls back
to an emptyDir, and NOTES says what is then lost. The size and StorageClass are values the schema checks.
"""

from __future__ import annotations

from typing import Any

import pytest
from helm_python import chart as hc
from helm_python.errors import HelmValuesError

from tests.chart.conftest import NAMESPACE, RELEASE, env_of, find, one, render_objects

LOG_DIR = "/var/lib/cdctl"


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = one(objects, "StatefulSet", "cdctl-controller")["spec"]["template"]["spec"]
    return pod


def _log_volume(objects: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """The volume mounted where the log lives, and its pod volume (None: it comes from a claim template)."""
    (container,) = _pod(objects)["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == LOG_DIR]
    volumes = {v["name"]: v for v in _pod(objects)["volumes"]}
    return mount["name"], volumes.get(mount["name"])


def _notes(chart: hc.Chart, values: dict[str, Any]) -> str:
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return str(manifests["cdctl/templates/NOTES.txt"])


def test_by_default_each_replica_keeps_its_log_on_a_claim_of_its_own(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["default"]
    assert find(objects, "Deployment") == []  # an upgrade replaces the former Deployment of that name
    statefulset = one(objects, "StatefulSet", "cdctl-controller")
    spec = statefulset["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "event-log"
    assert claim["metadata"]["labels"] == spec["selector"]["matchLabels"]
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert _log_volume(objects) == ("event-log", None)  # the claim, not a pod volume
    env = env_of(_pod(objects)["containers"][0])
    assert env["CDCTL_DB"] == f"{LOG_DIR}/controller.db"
    assert env["CDCTL_LOG_KEY_FILE"] == "/etc/cdctl/event-log-key/key"  # the keyed log still works
    security = _pod(objects)["securityContext"]
    assert (security["fsGroup"], security["fsGroupChangePolicy"]) == (65532, "OnRootMismatch")


def test_a_headless_service_governs_the_statefulset(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for scenario in ("default", "leader-election"):
        objects = rendered[scenario]
        statefulset = one(objects, "StatefulSet", "cdctl-controller")
        service = one(objects, "Service", statefulset["spec"]["serviceName"])
        assert service["metadata"]["namespace"] == NAMESPACE
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
        assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
        assert service["spec"]["ports"] == [
            {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
        ]


def test_size_and_storage_class_are_values(helm_chart: hc.Chart) -> None:
    def claim(persistence: dict[str, Any]) -> dict[str, Any]:
        objects = render_objects(helm_chart, {"controller": {"persistence": persistence}})
        spec: dict[str, Any] = one(objects, "StatefulSet")["spec"]["volumeClaimTemplates"][0]["spec"]
        return spec

    fast = claim({"size": "20Gi", "storageClassName": "fast-ssd"})
    assert (fast["resources"]["requests"]["storage"], fast["storageClassName"]) == ("20Gi", "fast-ssd")
    assert claim({"storageClassName": "-"})["storageClassName"] == ""  # no class: a pre-created volume
    assert "storageClassName" not in claim({"storageClassName": ""})  # the cluster's default class


def test_without_persistence_the_log_is_on_an_emptydir_and_notes_say_what_is_lost(
    helm_chart: hc.Chart,
) -> None:
    values = {"controller": {"persistence": {"enabled": False}}}
    objects = render_objects(helm_chart, values)
    spec = one(objects, "StatefulSet", "cdctl-controller")["spec"]
    assert "volumeClaimTemplates" not in spec and "persistentVolumeClaimRetentionPolicy" not in spec
    assert _log_volume(objects) == ("event-log", {"name": "event-log", "emptyDir": {}})
    assert env_of(_pod(objects)["containers"][0])["CDCTL_DB"] == f"{LOG_DIR}/controller.db"
    notes = " ".join(_notes(helm_chart, values).split())
    assert "WARNING: controller.persistence.enabled=false" in notes
    assert "history" in notes and "lost whenever its pod goes" in notes
    kept = " ".join(_notes(helm_chart, {}).split())
    assert "WARNING" not in kept and "get pvc -l app.kubernetes.io/instance=cdctl" in kept


@pytest.mark.parametrize(
    "persistence",
    [
        {"size": "lots"},
        {"size": 10},
        {"storageClassName": "Fast_SSD"},
        {"enabled": "yes"},
        {"accessModes": ["ReadWriteMany"]},
    ],
)
def test_the_schema_refuses_bad_persistence_values(helm_chart: hc.Chart, persistence: dict[str, Any]) -> None:
    with pytest.raises(HelmValuesError):
        helm_chart.validate_schema({"controller": {"persistence": persistence}})
