"""cdctl controller: ComputeDomain reconcilers (one module per managed kind), leader election, status.

Flow: informers (cdctl.k8s.informer) -> `journal` (each observation an event in stream `domain/<uid>`,
folded into the `view` projection) -> keyed work queue (`queue`, batch window per domain) ->
`computedomain` (the level-based reconcile), which reads the view and acts through `actions` (every write an
intention and an outcome in the log). Managed kinds: `resourceclaimtemplate`, `daemonset`, `clique`,
`status`, `nodes`; objects are rendered by the pure `render`. With --rack-domains, `rackdomains` creates
and removes one ComputeDomain per rack (decisions in stream `rack/<name>`). Around it: `manager` (wiring,
first sync, sweep), `app` (discovery, event log, HTTP endpoint, leader election), `leader`, `http`, `metrics`,
`settings`. Entry point: cdctl.cli.controller.
"""
