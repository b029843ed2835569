"""Names of the shared IMEX daemon under `channel` isolation with driver-managed IMEX.

One chart-owned DaemonSet (charts/cdctl/templates/imex-daemon.yaml) runs one long-lived `cdctl daemon run
--shared` per GPU node, tied to no ComputeDomain. Its pods carry SHARED_DAEMON_LABELS; each daemon labels its
own pod with its clique (cdctl.domain.computedomains.LABEL_CLIQUE_ID), and its peers are the pods of the same
DaemonSet with that clique label (cdctl.daemon). The kubelet plugin waits for the pod on its node to be Ready
before a channel claim completes (cdctl.k8s.plugincluster). Called by the daemon, the plugin, the simulated
rack and the chart tests, so all of them read the same names. Pure: no I/O.
"""

from __future__ import annotations

COMPONENT_LABEL = "app.kubernetes.io/component"
SHARED_DAEMON_COMPONENT = "imex-daemon"
# What the DaemonSet's pod template carries (with the chart's own labels): its selector and the plugin's.
SHARED_DAEMON_LABELS = {COMPONENT_LABEL: SHARED_DAEMON_COMPONENT}
SHARED_DAEMON_SELECTOR = f"{COMPONENT_LABEL}={SHARED_DAEMON_COMPONENT}"
# The host directory the shared daemon's pod mounts at /imexd: `<kubelet plugins dir>/<driver>/SHARED_DIR`.
# The kubelet plugin keeps the IMEX config template and the node's clique ID (CLIQUE_FILE) there.
SHARED_DIR = "shared-imex"
CLIQUE_FILE = "clique"  # cdctl.daemon.check keeps the same name, import-free
# `<fullname>-imex-daemon`: the DaemonSet and its ServiceAccount.
SHARED_DAEMON_SUFFIX = "imex-daemon"


def shared_daemon_name(fullname: str) -> str:
    """The DaemonSet (and ServiceAccount) of a release whose objects are named `fullname`-..."""
    return f"{fullname}-{SHARED_DAEMON_SUFFIX}"
