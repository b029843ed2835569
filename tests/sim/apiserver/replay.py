"""Replays a real kube-apiserver's recorded exchanges (tests/realanswers.py) against the simulated API server.

Each exchange is sent over HTTP, in the order the real server received them, and the simulated server's
answer is compared with the real one after `normalize`. What the recording cannot carry over is bridged, never
compared away:
- **Identities.** Objects the simulated server creates get their own uids and generated names; `Replay`
  maps them both ways (requests are rewritten to the simulated server's, answers back to the real server's).
- **The world the recording leaves out.** Other clients (the scheduler, the kubelets, the DaemonSet
  controller, the test driver that made the ComputeDomain and the pods) wrote objects in between. Before each
  exchange, every object it reads or writes is brought to the real server's last known state of it (the
  newest earlier answer that carried it; for a read, the answer itself; for an update with nothing earlier
  known, the request), written in process as the admin.
- **Preconditions.** A `resourceVersion` in a request names the real server's version; it is replaced by the
  simulated object's current one, so that a precondition holds here exactly when it held there.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import aiohttp

from cdctl.sim.apiserver.errors import NotFound
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.store import ObjectStore

JsonObject = dict[str, Any]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
_STATUS_ONLY = "status"


@dataclass(frozen=True)
class Target:
    """What a request path names."""

    group: str
    version: str
    plural: str
    namespace: str
    name: str
    subresource: str

    @staticmethod
    def parse(path: str) -> Target | None:
        parts = urlsplit(path).path.strip("/").split("/")
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces" and (len(rest) > 2):
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
        return Target(group, version, plural, namespace, name, sub)


def walk_strings(value: Any, change: Any) -> Any:
    """`value` with every string (keys too) passed through `change`."""
    if isinstance(value, dict):
        return {change(k): walk_strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [walk_strings(v, change) for v in value]
    return change(value) if isinstance(value, str) else value


def normalize(value: Any) -> Any:
    """What necessarily differs between two runs, made equal (the recording's README lists it):
    resourceVersions, timestamps and managedFields' times. managedFields themselves are compared apart
    (see the test's tolerated differences)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "resourceVersion" and isinstance(item, str):
                out[key] = "<rv>"
            elif key == "managedFields":
                out[key] = "<managedFields>"
            else:
                out[key] = normalize(item)
        return out
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        return "<time>"
    return value


def differences(real: Any, sim: Any, path: str = "") -> list[str]:
    """Paths (`.a.b[0]`) where two normalized answers differ, each with both values."""
    if isinstance(real, dict) and isinstance(sim, dict):
        found = []
        for key in sorted(real.keys() | sim.keys()):
            where = f"{path}.{key}"
            if key not in sim:
                found.append(f"{where}: real {json.dumps(real[key])[:120]}, simulated: absent")
            elif key not in real:
                found.append(f"{where}: real absent, simulated {json.dumps(sim[key])[:120]}")
            else:
                found += differences(real[key], sim[key], where)
        return found
    if isinstance(real, list) and isinstance(sim, list) and len(real) == len(sim):
        return [
            d
            for i, (r, s) in enumerate(zip(real, sim, strict=True))
            for d in differences(r, s, f"{path}[{i}]")
        ]
    if real != sim:
        return [f"{path}: real {json.dumps(real)[:120]}, simulated {json.dumps(sim)[:120]}"]
    return []


@dataclass
class Outcome:
    seq: int
    exchange: JsonObject
    status: int
    answer: Any
    differences: list[str] = field(default_factory=list)


class Replay:
    def __init__(self, server: ApiServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.store: ObjectStore = server.store
        self.session = session
        self.to_sim: dict[str, str] = {}  # real uid or generated name -> the simulated server's
        self.to_real: dict[str, str] = {}
        self.known: dict[tuple[str, str, str, str], JsonObject] = {}  # (group, plural, ns, name) -> state

    # ---- identities ----------------------------------------------------------------------------------------
    def _map(self, real: str, sim: str) -> None:
        if real != sim:
            self.to_sim[real], self.to_real[sim] = sim, real

    def _rewrite(self, text: str, mapping: dict[str, str]) -> str:
        for old, new in mapping.items():
            if old in text:
                text = text.replace(old, new)
        return text

    def sim_side(self, value: Any) -> Any:
        return walk_strings(value, lambda s: self._rewrite(s, self.to_sim))

    def real_side(self, value: Any) -> Any:
        return walk_strings(value, lambda s: self._rewrite(s, self.to_real))

    # ---- the world -----------------------------------------------------------------------------------------
    def _storage(self, group: str, plural: str) -> Any:
        return self.store.type_of(group, plural)

    def _learn(self, target: Target | None, answer: Any) -> None:
        """Remember every object the real server answered with, by identity."""
        if target is None or not isinstance(answer, dict) or answer.get("kind") == "Status":
            return
        items = answer.get("items") if answer.get("kind", "").endswith("List") else [answer]
        for item in items or []:
            meta = item.get("metadata") or {}
            self.known[(target.group, target.plural, meta.get("namespace", ""), meta.get("name", ""))] = item

    def _remove(self, storage: Any, current: JsonObject) -> None:
        """Take an object out of the simulated server whatever its finalizers (the world moved on)."""
        meta = current["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if meta.get("finalizers"):
            current = self.store.update(
                storage, namespace, name, {**current, "metadata": {**meta, "finalizers": []}}
            )
        with contextlib.suppress(NotFound):
            self.store.delete(storage, namespace, name)

    def _put(self, group: str, plural: str, state: JsonObject) -> None:
        """Make the simulated server hold `state` (a real server's object), as the admin, in process: the
        same object (uid) in the same state; an object of that name with another uid is gone first."""
        storage = self._storage(group, plural)
        state = self.sim_side(copy.deepcopy(state))
        meta = state.setdefault("metadata", {})
        namespace, name, uid = meta.get("namespace", ""), meta["name"], meta.get("uid")
        for system in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
            meta.pop(system, None)
        deleting = meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        try:
            current = self.store.get(storage, namespace, name)
        except NotFound:
            current = None
        ahead = current is not None and current["metadata"].get("deletionTimestamp") and not deleting
        if current is not None and ((uid and current["metadata"]["uid"] != uid) or ahead):
            self._remove(storage, current)  # another object of that name, or one deleted here sooner
            current = None
        if current is None:
            current = self.store.create(storage, namespace, state, uid=uid or None)
        else:
            node = (state.get("spec") or {}).get("nodeName")
            if plural == "pods" and node and not current["spec"].get("nodeName"):  # the scheduler's binding
                current["spec"]["nodeName"] = node
                current = self.store.update(storage, namespace, name, current, subresource="binding")
            body = {**state, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
            current = self.store.update(storage, namespace, name, body)
        if storage.status_subresource and "status" in state and current.get("status") != state["status"]:
            body = {**current, "status": state["status"]}
            current = self.store.update(storage, namespace, name, body, subresource=_STATUS_ONLY)
        if deleting and not current["metadata"].get("deletionTimestamp"):
            self.store.delete(storage, namespace, name)

    async def _sync_list(self, target: Target, exchange: JsonObject) -> None:
        """The simulated server holds what the real list held, and nothing more in the list's scope."""
        response = exchange["response"]
        if not isinstance(response, dict):
            return  # over 20 KB: not recorded
        items = response.get("items") or []
        for item in items:
            self._put(target.group, target.plural, item)
        listed = {self.to_sim.get(i["metadata"]["name"], i["metadata"]["name"]) for i in items}
        async with self.session.get(self.server.url + self._path(exchange)) as answer:
            present = (await answer.json(content_type=None)).get("items") or []
        storage = self._storage(target.group, target.plural)
        for item in present:
            if item["metadata"]["name"] not in listed:
                self._remove(storage, item)

    def _prior_state(self, target: Target, exchange: JsonObject) -> JsonObject | None:
        """The real object the exchange acted on, as it was just before (as far as the recording tells);
        None when there was none."""
        response, request = exchange["response"], exchange["request"]
        if exchange["status"] == 404:
            return None
        acted_on = response if isinstance(response, dict) and response.get("kind") != "Status" else None
        if exchange["verb"] == "get":
            return acted_on
        uid = ((acted_on or {}).get("metadata") or {}).get("uid")
        known = self.known.get((target.group, target.plural, target.namespace, target.name))
        if known is not None and uid and known["metadata"].get("uid") != uid:
            known = None  # deleted and made again by a client the recording does not hold
        state = known
        if state is None and exchange["verb"] == "update" and isinstance(request, dict):
            state = request
        if state is None:
            state = acted_on
        if state is None:
            return None
        deleting = ((request or {}).get("metadata") or {}) if isinstance(request, dict) else {}
        if exchange["verb"] != "delete":
            deleting = (
                deleting if deleting.get("deletionTimestamp") else (acted_on or {}).get("metadata") or {}
            )
        if deleting.get("deletionTimestamp") and not state["metadata"].get("deletionTimestamp"):
            state = copy.deepcopy(state)
            state["metadata"]["deletionTimestamp"] = deleting["deletionTimestamp"]
        return state

    async def _sync(self, target: Target | None, exchange: JsonObject) -> None:
        if target is None or exchange["verb"] in ("create", "watch"):
            return
        if exchange["verb"] == "list":
            if exchange["status"] == 200:
                await self._sync_list(target, exchange)
            return
        state = self._prior_state(target, exchange)
        if state is not None:
            self._put(target.group, target.plural, state)
        elif exchange["status"] == 404 and target.name:
            storage = self._storage(target.group, target.plural)
            with contextlib.suppress(NotFound):
                name = self.to_sim.get(target.name, target.name)
                self._remove(storage, self.store.get(storage, target.namespace, name))

    # ---- one exchange --------------------------------------------------------------------------------------
    def _precondition(self, target: Target, body: Any) -> Any:
        """A request's resourceVersion, made the simulated object's current one."""
        if not isinstance(body, dict) or not (body.get("metadata") or {}).get("resourceVersion"):
            return body
        storage = self._storage(target.group, target.plural)
        try:
            current = self.store.get(storage, target.namespace, self.to_sim.get(target.name, target.name))
        except NotFound:
            return body
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return body

    def _path(self, exchange: JsonObject) -> str:
        split = urlsplit(self._rewrite(exchange["path"], self.to_sim))
        query = []
        for key, value in parse_qsl(split.query, keep_blank_values=True):
            if key == "resourceVersion" and value not in ("", "0"):
                value = self.store.resource_version  # a real server's revision means nothing here
            query.append((key, value))
        return split.path + (f"?{urlencode(query)}" if query else "")

    async def send(self, exchange: JsonObject) -> Outcome:
        target = Target.parse(exchange["path"])
        await self._sync(target, exchange)
        body = self.sim_side(exchange["request"])
        if target is not None and exchange["verb"] in ("update", "patch"):
            body = self._precondition(target, body)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None and exchange["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            headers["Content-Type"] = CONTENT_TYPES.get(exchange["content_type"] or "", "application/json")
            data = json.dumps(body)
        url = self.server.url + self._path(exchange)
        if exchange["verb"] == "watch":
            async with self.session.get(url, headers=headers) as response:
                return Outcome(exchange["seq"], exchange, response.status, None)
        async with self.session.request(exchange["method"], url, headers=headers, data=data) as response:
            answer = await response.json(content_type=None)
        if exchange["verb"] == "create" and response.status == 201 and isinstance(exchange["response"], dict):
            real_meta, sim_meta = exchange["response"]["metadata"], answer["metadata"]
            self._map(real_meta["uid"], sim_meta["uid"])
            self._map(real_meta["name"], sim_meta["name"])
        self._learn(target, exchange["response"])
        answer = self.real_side(answer)
        found = differences(normalize(exchange["response"]), normalize(answer))
        return Outcome(exchange["seq"], exchange, response.status, answer, found)
