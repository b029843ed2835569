"""The event logs' key: a Secret created at install, kept across upgrades and uninstalls, mounted read-only
into the controller and the kubelet plugin and named by CDCTL_LOG_KEY_FILE (on by default)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

from helm_python import chart as hc

from tests.chart.conftest import CHART_DIR, RELEASE, render_objects

SECRET = f"{RELEASE}-event-log-key"
KEY_FILE = "/etc/cdctl/event-log-key/key"


def _workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["kind"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("StatefulSet", "DaemonSet")
    }


def _key_wiring(pod: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    """(CDCTL_LOG_KEY_FILE, the secret mounted at its directory, mounted read-only) of a pod's container."""
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"] == str(Path(KEY_FILE).parent):
            secret = volumes[mount["name"]]["secret"]["secretName"]
            return env.get("CDCTL_LOG_KEY_FILE"), secret, bool(mount.get("readOnly"))
    return env.get("CDCTL_LOG_KEY_FILE"), None, False


def test_by_default_a_kept_secret_holds_a_random_key_mounted_into_both_components(
    helm_chart: hc.Chart,
) -> None:
    objects = render_objects(helm_chart)
    [secret] = [o for o in objects if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == SECRET
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert len(base64.b64decode(secret["data"]["key"])) == 64
    workloads = _workloads(objects)
    assert set(workloads) == {"StatefulSet", "DaemonSet"}
    for pod in workloads.values():
        assert _key_wiring(pod) == (KEY_FILE, SECRET, True)
    controller = workloads["StatefulSet"]
    [volume] = [v for v in controller["volumes"] if "secret" in v]
    assert volume["secret"]["defaultMode"] == 0o440 and controller["securityContext"]["fsGroup"] == 65532


def test_turned_off_there_is_no_secret_and_no_key(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, {"eventLog": {"keySecret": {"enabled": False}}})
    assert not [o for o in objects if o["kind"] == "Secret"]
    for pod in _workloads(objects).values():
        assert _key_wiring(pod) == (None, None, False)


def test_a_secret_of_ones_own_is_mounted_and_not_created(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, {"eventLog": {"keySecret": {"create": False, "name": "my-log-key"}}})
    assert not [o for o in objects if o["kind"] == "Secret"]
    for pod in _workloads(objects).values():
        assert _key_wiring(pod) == (KEY_FILE, "my-log-key", True)


def test_an_upgrade_keeps_the_key_it_finds(tmp_path: Path) -> None:
    """Offline, `lookup` finds nothing; here it is replaced by the Secret an earlier install left."""
    chart_dir = tmp_path / "cdctl"
    shutil.copytree(CHART_DIR, chart_dir)
    template = chart_dir / "templates" / "event-log-key.yaml"
    text = template.read_text()
    found = '(dict "data" (dict "key" "a2VwdA=="))'
    assert 'lookup "v1" "Secret" .Release.Namespace $name' in text
    template.write_text(text.replace('lookup "v1" "Secret" .Release.Namespace $name', found))
    chart = hc.Chart.load(chart_dir)
    try:
        [secret] = [o for o in render_objects(chart) if o["kind"] == "Secret"]
    finally:
        chart.close()
    assert secret["data"]["key"] == "a2VwdA=="
