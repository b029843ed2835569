"""The operator running a scenario: `cluster.SimCluster` assembles API server, controllers and one kubelet per
node; `launch.Rack` starts the real components as processes on it; `scenario`, `checks`, `workload`,
`liveview` and `rackcommand` are what `cdctl sim rack` runs and shows; `chart` renders the Helm chart's
objects the way Helm would.

The top of the simulator: it may import every other part of it, and nothing in it imports this package.
"""
