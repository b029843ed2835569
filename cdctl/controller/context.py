"""What every reconciler module shares: settings, the view, the journal, actions, events, resource types.

Built once by cdctl.controller.manager after API discovery; passed to each reconciler's constructor.
`formed` reports how long a domain took to turn Ready (the manager hands it the metrics' histogram).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cdctl.controller.actions import Actions
from cdctl.controller.journal import Journal
from cdctl.controller.settings import ControllerSettings
from cdctl.controller.view import DomainView
from cdctl.k8s.kube_events import EventRecorder
from cdctl.k8s.resources import ResourceType, resource_claim_templates
from cdctl.k8s.rest import KubeApi


@dataclass(frozen=True)
class ReconcileContext:
    settings: ControllerSettings
    api: KubeApi
    view: DomainView
    journal: Journal
    actions: Actions
    recorder: EventRecorder
    resource_version: str
    # Seconds a domain took to turn Ready (cdctl.controller.status measures, the metrics keep).
    formed: Callable[[float], None] = lambda _seconds: None

    @property
    def claim_templates(self) -> ResourceType:
        return resource_claim_templates(self.resource_version)
