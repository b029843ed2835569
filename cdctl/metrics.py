"""The Prometheus conventions every cdctl component's registry follows, in one place.

`component_registry(component)` is the registry a component serves on `/metrics`: what prometheus_client's
default registry carries (`process_*`, `python_gc_*`, `python_info`, from the library's own collectors) plus
`cdctl_build_info{component, version, python_version}` (value 1). A component adds its own metrics to it
(the controller's cdctl.controller.metrics, the plugin's cdctl.plugin.metrics, the event log's
cdctl.store.metrics); anything else that wants to publish a metric registers on the same registry.

Why not `prometheus_client.REGISTRY` itself: the tests, the benchmarks and `cdctl demo` run several
components in one process, and the default registry refuses a second metric of the same name; a registry per
component with the default registry's collectors gives the same exposition as the default one would.

Importing this module turns the `_created` series off for the whole process (prometheus_client's
`disable_created_metrics`, the supported switch; the environment variable PROMETHEUS_DISABLE_CREATED_SERIES
does the same before import): they double the series of every counter and histogram and no dashboard of ours
reads them.
Used by cdctl.controller.metrics and cdctl.plugin.metrics.
"""

from __future__ import annotations

import platform

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from cdctl import __version__

disable_created_metrics()  # type: ignore[no-untyped-call]

BUILD_INFO = "cdctl_build_info"


def component_registry(component: str) -> CollectorRegistry:
    """A registry with the default registry's collectors and `cdctl_build_info` for `component`."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    info = Gauge(
        BUILD_INFO,
        "cdctl build that runs this component (value 1): version, component, Python version",
        ["component", "version", "python_version"],
        registry=registry,
    )
    info.labels(component, __version__, platform.python_version()).set(1)
    return registry
