"""What a prepared device puts on the node: its CDI edits and, for a daemon, the domain's directory.

Built the same way by a first Prepare (cdctl.plugin.prepare) and by the repair of a completed one
(cdctl.plugin.repair), so a repaired spec or directory is exactly what the first Prepare wrote. A channel
device carries the channel device nodes (none without a clique); a daemon device carries the domain's
identity (env), the `fabric-imex-mgmt` capability node (with a clique) and the domain directory mounted at
`/imexd`, which holds the IMEX config template `imexd.cfg.tmpl`. Under channel isolation with
driver-managed IMEX the plugin keeps the shared daemon's directory the same way, with the node's clique ID
beside the template.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from cdctl.api.refs import DomainInfo
from cdctl.api.shareddaemon import CLIQUE_FILE
from cdctl.plugin import cdi

TEMPLATE_NAME = "compute-domain-daemon-config.tmpl.cfg"
TEMPLATE_FILE = "imexd.cfg.tmpl"
DAEMON_MOUNT = "/imexd"


@cache
def template_text() -> str:
    return (resources.files("cdctl.plugin") / "templates" / TEMPLATE_NAME).read_text()


@dataclass
class DeviceFacts:
    """The node facts edits are built from: device majors (read once from `proc_devices`) and the clique."""

    proc_devices: str
    fabric_imex_mgmt_cap: str
    _majors: dict[str, int] = field(default_factory=dict)

    def major(self, name: str) -> int:
        if name not in self._majors:
            self._majors[name] = cdi.device_major(name, self.proc_devices)
        return self._majors[name]


def channel_device(
    claim_uid: str, device: str, channels: Iterable[int], clique: str, facts: DeviceFacts
) -> tuple[cdi.ClaimDevice | None, list[str]]:
    """The channels (domain isolation: [0, count); channel isolation: the domain's one) as device nodes
    and the claim's CDI id; neither without a clique."""
    if not clique:
        return None, []
    major = facts.major(cdi.CHANNEL_DEVICE_MAJOR_NAME)
    nodes = tuple(cdi.channel_device_node(n, major) for n in channels)
    return cdi.ClaimDevice(device, cdi.ContainerEdits(device_nodes=nodes)), [
        cdi.claim_device_id(claim_uid, device)
    ]


def daemon_device(
    claim_uid: str, device: str, domain: DomainInfo, root: Path, clique: str, facts: DeviceFacts
) -> tuple[cdi.ClaimDevice, list[str]]:
    """The daemon's env, capability node (with a clique) and `/imexd` mount, and its CDI ids."""
    env = (
        f"CLIQUE_ID={clique}",
        f"COMPUTE_DOMAIN_UUID={domain.uid}",
        f"COMPUTE_DOMAIN_NAME={domain.name}",
        f"COMPUTE_DOMAIN_NAMESPACE={domain.namespace}",
    )
    nodes: tuple[cdi.DeviceNode, ...] = ()
    if clique:
        cap = cdi.read_capability(facts.fabric_imex_mgmt_cap)
        major = facts.major(cdi.CAPS_DEVICE_MAJOR_NAME)
        nodes = (cdi.DeviceNode(f"/dev/nvidia-caps/nvidia-cap{cap.minor}", major, cap.minor, cap.mode),)
    edits = cdi.ContainerEdits(env=env, device_nodes=nodes, mounts=(cdi.Mount(str(root), DAEMON_MOUNT),))
    return cdi.ClaimDevice(device, edits), [cdi.BASE_DEVICE_ID, cdi.claim_device_id(claim_uid, device)]


def domain_dir_current(root: Path) -> bool:
    """Whether the domain directory holds the IMEX config template as this version ships it."""
    try:
        return (root / TEMPLATE_FILE).read_text() == template_text()
    except (OSError, UnicodeDecodeError):
        return False


def write_domain_dir(root: Path) -> None:
    """Create the domain directory (0755) and write the template into it atomically (0644)."""
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = root / f".{TEMPLATE_FILE}.tmp"
    tmp.write_text(template_text())
    tmp.chmod(0o644)
    tmp.replace(root / TEMPLATE_FILE)


def write_shared_dir(root: Path, clique: str) -> None:
    """The shared IMEX daemon's directory (channel isolation, driver-managed; cdctl.api.shareddaemon): the
    IMEX config template, then the node's clique ID, each atomically, so a daemon that finds the clique
    finds the template too."""
    write_domain_dir(root)
    tmp = root / f".{CLIQUE_FILE}.tmp"
    tmp.write_text(f"{clique}\n")
    tmp.chmod(0o644)
    tmp.replace(root / CLIQUE_FILE)
