"""`cdctl daemon run` under the chart's own RBAC and admission policies: the simulated API server enforces the
rendered roles and policies for the daemons' service account (each daemon's token bound to its pod), so a
request the chart does not grant fails here as on a real cluster.

Two daemons labelling their pods, following their clique to READY and stopping must be refused nothing.
"""

from __future__ import annotations

from cdctl.domain.computedomains import DaemonEntry
from cdctl.sim.apiserver.rbac import service_account_token
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import chart_policies, chart_rbac
from tests.daemon.conftest import FakeImex, eventually
from tests.daemon.rig import CLIQUE, DRIVER_NAMESPACE, open_rig

ACCOUNT = "compute-domain-daemon-service-account"


async def test_daemons_need_nothing_the_chart_does_not_grant(fake_imex: FakeImex) -> None:
    rbac = chart_rbac(DRIVER_NAMESPACE)
    async with ApiServer() as server:
        rig = await open_rig(server, fake_imex)
        try:
            server.rbac.load(rbac)
            server.load_policies(chart_policies(DRIVER_NAMESPACE))
            a0 = rig.daemon("a0", "n1", "10.60.0.1", "uid-a")
            a1 = rig.daemon("a1", "n2", "10.60.0.2", "uid-a")
            for daemon in (a0, a1):  # each daemon connects as its account, its token bound to its pod
                token = service_account_token(
                    DRIVER_NAMESPACE, ACCOUNT, pod=daemon.name, pod_uid=f"uid-{daemon.name}", node=daemon.node
                )
                kubeconfig = server.write_kubeconfig(daemon.imexd / "kubeconfig", token)
                daemon.env["KUBECONFIG"] = str(kubeconfig)
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
    assert server.store.policies.denials == []
