"""The device health model: every input the plugin knows, to each device's health and message, and the board
that streams it."""

from __future__ import annotations

import asyncio

import pytest

from cdctl.plugin import nvml
from cdctl.plugin.health import (
    MAX_MESSAGE,
    DaemonReading,
    DeviceReport,
    FabricReading,
    Health,
    HealthBoard,
    HealthInputs,
    device_health,
    fabric_problem,
    truncate,
)
from cdctl.plugin.nvml import FabricInfo, GpuFabric

U = "6a130f54-faaa-4b8f-847f-be44ab70f917"
CLIQUE = f"{U}.7"


def gpus(
    state: int = nvml.STATE_COMPLETED, status: int = 0, uuid: str = U, clique: int = 7
) -> tuple[GpuFabric, ...]:
    return tuple(GpuFabric(i, f"GPU-{i}", FabricInfo(uuid, clique, state, status)) for i in range(2))


def inputs(**kw: object) -> HealthInputs:
    base: dict[str, object] = {"pool": "n1", "clique_id": CLIQUE, "host_managed": False,
                               "fabric": FabricReading(gpus())}  # fmt: skip
    base.update(kw)
    return HealthInputs(**base)  # type: ignore[arg-type]


def by_device(reports: list[DeviceReport]) -> dict[str, tuple[Health, str]]:
    assert all(r.pool == "n1" for r in reports)
    return {r.device: (r.health, r.message) for r in reports}


def test_a_completed_fabric_serves_both_devices_healthy() -> None:
    got = by_device(device_health(inputs()))
    assert got == {
        "channel-0": (Health.HEALTHY, f"NVLink fabric COMPLETED; clique {CLIQUE}"),
        "daemon-0": (Health.HEALTHY, "no IMEX daemon prepared on this node"),
    }


@pytest.mark.parametrize(
    ("state", "status", "words"),
    [
        (nvml.STATE_IN_PROGRESS, 0, "fabric state is IN_PROGRESS"),
        (nvml.STATE_NOT_STARTED, 0, "fabric state is NOT_STARTED"),
        (nvml.STATE_COMPLETED, 17, "fabric status is 17, not SUCCESS"),
    ],
)
def test_a_degraded_fabric_turns_both_devices_unhealthy_with_the_reason(
    state: int, status: int, words: str
) -> None:
    got = by_device(device_health(inputs(fabric=FabricReading(gpus(state, status)))))
    for device in ("channel-0", "daemon-0"):
        health, message = got[device]
        assert health is Health.UNHEALTHY
        assert message.startswith("NVLink fabric degraded: GPU 0 (GPU-0)") and words in message


def test_a_changed_clique_is_unhealthy() -> None:
    got = by_device(device_health(inputs(fabric=FabricReading(gpus(clique=8)))))
    assert got["channel-0"][0] is Health.UNHEALTHY
    assert f"changed from {CLIQUE} to {U}.8" in got["channel-0"][1]


def test_gpus_disagreeing_on_the_clique_are_unhealthy() -> None:
    mixed = (*gpus()[:1], GpuFabric(1, "GPU-1", FabricInfo(U, 9, nvml.STATE_COMPLETED)))
    health, message = by_device(device_health(inputs(fabric=FabricReading(mixed))))["channel-0"]
    assert health is Health.UNHEALTHY and "CliqueIDs" in message


def test_a_node_without_fabric_serves_the_empty_clique_healthy() -> None:
    none = tuple(GpuFabric(i, f"GPU-{i}", None) for i in range(2))
    got = by_device(device_health(inputs(clique_id="", fabric=FabricReading(none))))
    assert got["channel-0"] == (Health.HEALTHY, "no NVLink clique on this node; IMEX channels are local only")
    # the fabric vanishing under a node that served a clique is a change of clique
    assert by_device(device_health(inputs(fabric=FabricReading(none))))["channel-0"][0] is Health.UNHEALTHY


def test_zero_cluster_uuid_completed_is_the_empty_clique() -> None:
    zero = gpus(uuid=nvml.ZERO_UUID, clique=0)
    assert fabric_problem(zero, "") is None
    assert fabric_problem(zero, CLIQUE) is not None


def test_unreadable_nvml_or_no_probe_yet_is_unknown() -> None:
    for reading, words in (
        (None, "not probed yet"),
        (FabricReading(error="NVML init: boom"), "NVML init: boom"),
    ):
        got = by_device(device_health(inputs(fabric=reading)))
        assert got["channel-0"][0] is Health.UNKNOWN and words in got["channel-0"][1]
        assert got["daemon-0"] == got["channel-0"]


def test_a_node_without_a_driver_serves_no_device() -> None:
    assert device_health(inputs(driver_missing="NVML Shared Library Not Found")) == []


def test_host_managed_serves_only_the_channel_and_checks_its_major() -> None:
    assert list(by_device(device_health(inputs(host_managed=True)))) == ["channel-0"]
    got = by_device(
        device_health(inputs(host_managed=True, channel_major_problem="no nvidia-caps-imex-channels"))
    )
    assert got == {
        "channel-0": (Health.UNHEALTHY, "IMEX channel device not usable: no nvidia-caps-imex-channels")
    }
    # without HostManagedIMEX the daemon registers the major: not a channel health input
    got = by_device(device_health(inputs(channel_major_problem="no nvidia-caps-imex-channels")))
    assert got["channel-0"][0] is Health.HEALTHY


@pytest.mark.parametrize(
    ("daemons", "health", "words"),
    [
        ((DaemonReading("d1", True),), Health.HEALTHY, "IMEX daemon of domain d1 Ready"),
        ((DaemonReading("d1", False),), Health.UNKNOWN, "IMEX daemon of domain d1 not Ready"),
        ((DaemonReading("d1", None),), Health.UNKNOWN, "readiness of the IMEX daemon of domain d1 unknown"),
        ((DaemonReading("d1", True), DaemonReading("d2", False)), Health.UNKNOWN, "domain d2 not Ready"),
    ],
)
def test_the_daemon_device_follows_its_domain_daemon(
    daemons: tuple[DaemonReading, ...], health: Health, words: str
) -> None:
    got = by_device(device_health(inputs(daemons=daemons)))
    assert got["daemon-0"][0] is health and words in got["daemon-0"][1]
    assert got["channel-0"][0] is Health.HEALTHY


def test_messages_are_cut_to_what_the_kubelet_keeps() -> None:
    assert truncate("x" * MAX_MESSAGE) == "x" * MAX_MESSAGE
    cut = truncate("y" * (MAX_MESSAGE + 5))
    assert len(cut) == MAX_MESSAGE and cut.endswith("...")


async def test_the_board_sends_on_open_on_change_and_when_quiet() -> None:
    board = HealthBoard(resend_s=0.2, timeout_s=5)
    a = [DeviceReport("n1", "channel-0", Health.HEALTHY, "ok")]
    b = [DeviceReport("n1", "channel-0", Health.UNHEALTHY, "bad")]
    stream = board.watch()
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.05)
    assert not first.done()  # nothing to send before the first check
    assert await board.publish(a, checked_at=100)
    assert (await asyncio.wait_for(first, 1)).reports == tuple(a)
    assert not await board.publish(a, checked_at=110)  # unchanged: no send, a fresher time for the next
    assert await board.publish(b, checked_at=120)
    changed = await asyncio.wait_for(anext(stream), 1)
    assert changed.reports == tuple(b) and changed.checked_at == 120 and changed.timeout_s == 5
    quiet = await asyncio.wait_for(anext(stream), 1)  # after resend_s with no change: sent again
    assert quiet.reports == tuple(b)
    await stream.aclose()
    assert board.watchers == 0


def test_channel_isolation_reports_each_shared_device_with_the_channels_health() -> None:
    shared = ("channel-slot-0", "channel-slot-1")
    got = by_device(device_health(inputs(shared_devices=shared)))
    assert got == {name: (Health.HEALTHY, f"NVLink fabric COMPLETED; clique {CLIQUE}") for name in shared}
    degraded = by_device(
        device_health(inputs(shared_devices=("channel",), fabric=FabricReading(gpus(status=17))))
    )
    assert list(degraded) == ["channel"] and degraded["channel"][0] is Health.UNHEALTHY
    no_major = device_health(inputs(shared_devices=("channel",), channel_major_problem="no major"))
    assert no_major[0].health is Health.UNHEALTHY and "no major" in no_major[0].message
