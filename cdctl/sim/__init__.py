"""The simulated cluster behind `cdctl sim` and the integration tests: API server, stand-ins, fakes.

Entry points:
- `server.ApiServer`: the Kubernetes API server on loopback (`async with ApiServer() as s`, `s.url`,
  `s.write_kubeconfig(path)`, `s.faults`, `s.drop_watches()`, `await s.restart()`); `s.store` is the
  in-process `store.ObjectStore` the stand-ins use; `s.rbac.load(objects)` enforces Roles and bindings for
  clients with a service-account token (`rbac`; the tests run each component under the chart's roles).
- `cluster.SimCluster`: API server + claim-template controller + allocator + DaemonSet controller + one
  `kubelet.SimKubelet` per node of a `topology.Topology` (racks of 18 nodes x 4 GPUs).
- `topology`: fake NVLink cliques and fabric states; `NodeDeviceLib` implements the plugin's DeviceLib and
  `FakeNode.fake_nvml_spec()` gives the plugin's `--fake-nvml` value.
- `fakeimex`: fake `nvidia-imex` / `nvidia-imex-ctl`; `install_executables(bin_dir)` puts them on a PATH.
- `fakedriver`: a node's fake `/proc` driver files (device majors, fabric-imex-mgmt capability, boot ID).
- `processruntime.ProcessRuntime`: runs selected pods' containers as local processes (CDI env, probes),
  for `SimCluster(runtime=...)`.
"""
