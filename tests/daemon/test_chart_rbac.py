"""`cdctl daemon run` under the chart's own RBAC: the simulated API server enforces the rendered roles for the
daemons' service account, so a request the chart does not grant fails here as on a real cluster.

Two daemons labelling their pods, following their clique to READY and stopping must be refused nothing.
"""

from __future__ import annotations

from cdctl.domain.computedomains import DaemonEntry
from cdctl.sim.apiserver.rbac import service_account_token
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import chart_rbac
from tests.daemon.conftest import FakeImex, eventually
from tests.daemon.rig import CLIQUE, DRIVER_NAMESPACE, open_rig

ACCOUNT = service_account_token(DRIVER_NAMESPACE, "compute-domain-daemon-service-account")


async def test_daemons_need_nothing_the_chart_does_not_grant(fake_imex: FakeImex) -> None:
    rbac = chart_rbac(DRIVER_NAMESPACE)
    async with ApiServer() as server:
        rig = await open_rig(server, fake_imex)
        try:
            server.rbac.load(rbac)
            server.write_kubeconfig(rig.kubeconfig, ACCOUNT)  # the daemons connect as their account
            a0 = rig.daemon("a0", "n1", "10.60.0.1", "uid-a")
            a1 = rig.daemon("a1", "n2", "10.60.0.2", "uid-a")
            for daemon in (a0, a1):
                await rig.start(daemon)
            await rig.wait_labelled(a0, a1)
            entries = [DaemonEntry("n1", "10.60.0.1", CLIQUE, 0), DaemonEntry("n2", "10.60.0.2", CLIQUE, 1)]
            rig.write_clique("uid-a", entries)
            await eventually(lambda: a0.ready() and a1.ready())
            assert await rig.stop(a0) == 0
            assert await rig.stop(a1) == 0
        finally:
            await rig.close()
    assert server.rbac.denials == []
