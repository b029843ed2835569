"""NVLink clique discovery behind a small device-library interface: real NVML (nvidia-ml-py) or a fake.

Called by the kubelet plugin at start-up and by its fabric re-probe loop. `DeviceLib.probe()` returns the
fabric info of every GPU; `discover_clique()` applies NVIDIA's rules to it and returns the node's clique ID
(`"<clusterUUID>.<cliqueId>"`, or "" for no clique) or, in strict mode (`CrashOnNVLinkFabricErrors`), says
that the fabric is not COMPLETED yet. Where the Go driver exits and crash-loops in that case, the caller keeps
serving without `channel-0` and probes again (a transitional state is not an error, upstream issue 1264);
a fabric that COMPLETED with an error status, or GPUs in different cliques, raise `NvmlError` and the plugin
fails fast, as the Go driver does. A single-node NVLink system (the node's own NVSwitches, managed by a local
Fabric Manager: `single_node_fabric()`) whose GPUs stay IN_PROGRESS (Fabric Manager's shared mode keeps GPUs
outside an activated partition unregistered) has no clique, as upstream PR 1289 decides: channel-0 is
published for local IMEX instead of never. `NvmlUnavailable` says the node has no usable GPU driver (the
library is missing or the kernel driver is not loaded): the plugin then serves no device. `FakeDeviceLib`
stands in for tests and the simulator (`--fake-nvml CLIQUE_ID[:STATE]`, `none` for no fabric, `no-driver`
for no GPU driver, a `:single-node` suffix for a single-node NVLink system); `--fake-nvml @FILE`
(`FileDeviceLib`) reads such a spec from FILE on every probe, so the simulator changes a node's fabric (its
state, or its clique) at run time by rewriting the file.
"""

from __future__ import annotations

import ctypes
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cdctl.domain.errors import InvalidInput, PermanentError

STATE_NOT_SUPPORTED = 0
STATE_NOT_STARTED = 1
STATE_IN_PROGRESS = 2
STATE_COMPLETED = 3
STATE_NAMES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
NVML_SUCCESS = 0
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
MIN_DRIVER_FOR_DNS_NAMES = (570, 158, 1)

# Where the Go driver looks for the library under the container driver root.
LIBRARY_DIRS = ("/", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64",
                "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu")  # fmt: skip


class NvmlError(PermanentError):
    """NVML could not be loaded or answered an unexpected error."""


class NvmlUnavailable(NvmlError):
    """No usable GPU driver on this node: libnvidia-ml cannot be loaded or the kernel driver is not loaded."""


NO_DRIVER_SPEC = "no-driver"
NO_DRIVER_MESSAGE = "NVML Shared Library Not Found"


@dataclass(frozen=True, slots=True)
class FabricInfo:
    cluster_uuid: str
    clique_id: int
    state: int
    status: int = NVML_SUCCESS


@dataclass(frozen=True, slots=True)
class GpuFabric:
    """One GPU: its index and UUID, and its fabric info (None when NVML says NOT_SUPPORTED)."""

    index: int
    uuid: str
    info: FabricInfo | None


class DeviceLib(Protocol):
    def probe(self) -> list[GpuFabric]: ...

    def driver_version(self) -> str: ...

    def single_node_fabric(self) -> bool: ...


NVLINK5_SWITCH_MANAGED = b"SW_MNG"


def has_local_fabric_manager(host_root: str | Path = "/") -> bool:
    """Whether the node has its own Fabric-Manager-managed NVLink fabric (a single-node NVLink system):
    NVSwitch devices in /proc/driver/nvidia-nvswitch/devices, or an NVLink5 switch tray (an InfiniBand device
    whose VPD says SW_MNG); the Go driver's checks. Unreadable paths count as no."""
    root = Path(host_root)
    try:
        if any((root / "proc/driver/nvidia-nvswitch/devices").iterdir()):
            return True
    except OSError:
        pass
    for vpd in root.glob("sys/class/infiniband/*/device/vpd"):
        try:
            if NVLINK5_SWITCH_MANAGED in vpd.read_bytes():
                return True
        except OSError:
            continue
    return False


@dataclass(frozen=True, slots=True)
class CliqueDiscovery:
    """The outcome of one probe: the clique ID, or why the fabric is not ready (strict mode only)."""

    clique_id: str
    pending: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return self.pending is None


def _attached_legacy(info: FabricInfo | None) -> bool:
    return (
        info is not None
        and info.state == STATE_COMPLETED
        and info.status == NVML_SUCCESS
        and info.cluster_uuid != ZERO_UUID
    )


def discover_clique(gpus: Sequence[GpuFabric], *, strict: bool, single_node: bool = False) -> CliqueDiscovery:
    """NVIDIA's clique rules; several distinct cluster UUIDs or clique IDs, or (strict) a fabric that
    completed with an error status, raise a permanent error. On a single-node NVLink system an incomplete
    registration is "no clique" (upstream PR 1289)."""
    notes: list[str] = []
    found: list[tuple[str, int]] = []
    for gpu in gpus:
        info = gpu.info
        tag = f"device {gpu.index}/{gpu.uuid}"
        if strict:
            if info is None or info.state == STATE_NOT_SUPPORTED:
                notes.append(f"{tag}: fabric not supported, skipped")
                continue
            if info.state != STATE_COMPLETED:
                state = STATE_NAMES.get(info.state, str(info.state))
                if single_node:
                    notes.append(
                        f"no-clique fallback: ignoring incomplete NVLink registration ({tag}, state={state}) "
                        "on a single-node NVLink system"
                    )
                    continue
                return CliqueDiscovery(
                    "", f"NVLink fabric not attached ({tag}): state={info.state} ({state})", tuple(notes)
                )
            if info.status != NVML_SUCCESS:
                raise NvmlError(
                    f"NVLink fabric registration error ({tag}): status={info.status}, refusing to start"
                )
            if info.cluster_uuid == ZERO_UUID:
                notes.append(f"no-clique fallback: cluster UUID is zero ({tag})")
                continue
        elif not _attached_legacy(info):
            notes.append(f"{tag}: not fabric-attached, skipped")
            continue
        assert info is not None
        notes.append(f"identified fabric clique UUID/ID ({tag}): {info.cluster_uuid}/{info.clique_id}")
        found.append((info.cluster_uuid, info.clique_id))
    if not found:
        return CliqueDiscovery("", None, tuple(notes))
    uuids = {u for u, _ in found}
    if len(uuids) > 1:
        raise NvmlError(f"unexpected number of unique ClusterUUIDs found on devices: {sorted(uuids)}")
    cliques = {c for _, c in found}
    if len(cliques) > 1:
        raise NvmlError(f"unexpected number of unique CliqueIDs found on devices: {sorted(cliques)}")
    return CliqueDiscovery(f"{found[0][0]}.{found[0][1]}", None, tuple(notes))


def driver_version_at_least(version: str, minimum: tuple[int, ...] = MIN_DRIVER_FOR_DNS_NAMES) -> bool:
    try:
        parts = tuple(int(p) for p in version.split("."))
    except ValueError:
        return False
    return parts >= minimum


class PynvmlDeviceLib:
    """The real NVML through nvidia-ml-py; initialises and shuts NVML down around each probe."""

    def __init__(self, driver_root: str = "/", host_root: str = "/") -> None:
        self._driver_root = driver_root
        self._host_root = host_root
        self._lock = threading.Lock()

    def single_node_fabric(self) -> bool:
        return has_local_fabric_manager(self._host_root)

    def _preload(self) -> None:
        # pynvml loads libnvidia-ml.so.1 by soname; preloading it from the driver root makes that resolve.
        for d in LIBRARY_DIRS:
            candidate = Path(self._driver_root) / d.lstrip("/") / "libnvidia-ml.so.1"
            if candidate.exists():
                ctypes.CDLL(str(candidate.resolve()), mode=ctypes.RTLD_GLOBAL)
                return

    def _session(self) -> Any:
        import pynvml

        try:
            self._preload()
        except OSError as exc:
            raise NvmlUnavailable(f"NVML init: loading libnvidia-ml.so.1: {exc}") from exc
        try:
            pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
        except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded) as exc:
            raise NvmlUnavailable(f"NVML init: {exc}") from exc
        except pynvml.NVMLError as exc:
            raise NvmlError(f"NVML init: {exc}") from exc
        return pynvml

    def driver_version(self) -> str:
        with self._lock:
            nv = self._session()
            try:
                v = nv.nvmlSystemGetDriverVersion()
                return v.decode() if isinstance(v, bytes) else str(v)
            finally:
                nv.nvmlShutdown()

    @staticmethod
    def _fabric(nv: Any, handle: Any) -> FabricInfo | None:
        try:
            info_v = nv.c_nvmlGpuFabricInfoV_t()
            nv.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info_v))
            info: Any = info_v
        except nv.NVMLError_FunctionNotFound:
            info = nv.c_nvmlGpuFabricInfo_t()
            try:
                nv.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            except nv.NVMLError_NotSupported:
                return None
        except nv.NVMLError_NotSupported:
            return None
        return FabricInfo(
            cluster_uuid=str(uuid.UUID(bytes=bytes(info.clusterUuid))),
            clique_id=int(info.cliqueId),
            state=int(info.state) & 0xFF,  # pynvml declares the C unsigned char as c_uint
            status=int(info.status),
        )

    def probe(self) -> list[GpuFabric]:
        with self._lock:
            nv = self._session()
            try:
                out: list[GpuFabric] = []
                for i in range(nv.nvmlDeviceGetCount()):
                    handle = nv.nvmlDeviceGetHandleByIndex(i)
                    raw = nv.nvmlDeviceGetUUID(handle)
                    gpu_uuid = raw.decode() if isinstance(raw, bytes) else str(raw)
                    out.append(GpuFabric(i, gpu_uuid, self._fabric(nv, handle)))
                return out
            except nv.NVMLError as exc:
                raise NvmlError(f"NVML probe: {exc}") from exc
            finally:
                nv.nvmlShutdown()


@dataclass
class FakeDeviceLib:
    """A fake node: `gpus` GPUs sharing one fabric info, no fabric at all (`cluster_uuid` None), or no GPU
    driver (`driver_missing`)."""

    cluster_uuid: str | None
    clique_id: int = 0
    state: int = STATE_COMPLETED
    status: int = NVML_SUCCESS
    gpus: int = 4
    version: str = "580.65.06"
    driver_missing: bool = False
    single_node: bool = False  # a single-node NVLink system (its own NVSwitches)
    probes: int = field(default=0, init=False)

    def single_node_fabric(self) -> bool:
        return self.single_node

    def _init(self) -> None:
        if self.driver_missing:
            raise NvmlUnavailable(f"NVML init: {NO_DRIVER_MESSAGE}")

    def probe(self) -> list[GpuFabric]:
        self.probes += 1
        self._init()
        info = None
        if self.cluster_uuid is not None:
            info = FabricInfo(self.cluster_uuid, self.clique_id, self.state, self.status)
        return [GpuFabric(i, f"GPU-fake-{i:04d}", info) for i in range(self.gpus)]

    def driver_version(self) -> str:
        self._init()
        return self.version


class FileDeviceLib:
    """A fake whose spec (as `fake_from_spec` reads it) is re-read from a file on every call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.probes = 0

    def _current(self) -> FakeDeviceLib:
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise NvmlError(f"fake NVML spec {self.path}: {exc}") from exc
        return fake_from_spec(text)

    def probe(self) -> list[GpuFabric]:
        self.probes += 1
        return self._current().probe()

    def driver_version(self) -> str:
        return self._current().driver_version()

    def single_node_fabric(self) -> bool:
        return self._current().single_node_fabric()


SINGLE_NODE_SUFFIX = ":single-node"


def fake_from_spec(spec: str) -> FakeDeviceLib:
    """`none`, `no-driver`, `CLIQUE_ID` or `CLIQUE_ID:STATE` (STATE a name such as IN_PROGRESS, or 0..3),
    each optionally followed by `:single-node` (a single-node NVLink system)."""
    text = spec.strip()
    single_node = text.lower().endswith(SINGLE_NODE_SUFFIX)
    if single_node:
        text = text[: -len(SINGLE_NODE_SUFFIX)]
        lib = fake_from_spec(text)
        lib.single_node = True
        return lib
    if text.lower() == "none":
        return FakeDeviceLib(cluster_uuid=None)
    if text.lower() == NO_DRIVER_SPEC:
        return FakeDeviceLib(cluster_uuid=None, driver_missing=True)
    clique, _, state_text = text.partition(":")
    cluster, dot, number = clique.rpartition(".")
    try:
        cluster_uuid = str(uuid.UUID(cluster)) if dot else ""
        clique_id = int(number)
    except ValueError as exc:
        raise InvalidInput(
            "--fake-nvml", spec, "want none, <clusterUUID>.<cliqueId> or that plus :STATE"
        ) from exc
    if not cluster_uuid:
        raise InvalidInput("--fake-nvml", spec, "want none, <clusterUUID>.<cliqueId> or that plus :STATE")
    state = STATE_COMPLETED
    if state_text:
        by_name = {v: k for k, v in STATE_NAMES.items()}
        if state_text.upper() in by_name:
            state = by_name[state_text.upper()]
        elif state_text.isdigit() and int(state_text) in STATE_NAMES:
            state = int(state_text)
        else:
            raise InvalidInput("--fake-nvml", spec, f"unknown fabric state {state_text!r}")
    return FakeDeviceLib(cluster_uuid=cluster_uuid, clique_id=clique_id, state=state)
