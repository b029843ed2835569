"""HTTP layer of the simulated API server: routes Kubernetes REST paths onto the object store.

`build_app(store, settings, faults)` returns the aiohttp application that cdctl.sim.apiserver.server runs. It
parses `/api/v1/...` and `/apis/<group>/<version>/...` paths (namespaced and cluster-wide), answers discovery,
and maps the verbs: GET, LIST (with selectors and limit/continue), WATCH (cdctl.sim.apiserver.watchstream),
POST, PUT, PATCH, DELETE and deletecollection, plus the `status` and pods `binding` subresources, the pods
`proxy` subresource (cdctl.sim.apiserver.proxy), and TokenRequest and TokenReview
(cdctl.sim.apiserver.authn).
Every write is made as the request's user (cdctl.sim.apiserver.identity), in the version it was sent in: both
are what the stored admission policies see. Every ApiError becomes a Status body. Each request is entered in
the audit log first (cdctl.sim.apiserver.audit), faults and refusals included.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from cdctl.sim.apiserver import authn, discovery, openapi, protobuf
from cdctl.sim.apiserver.audit import AuditLog
from cdctl.sim.apiserver.conversion import convert
from cdctl.sim.apiserver.errors import (
    ApiError,
    BadRequest,
    Conflict,
    InternalError,
    MethodNotAllowed,
    NotFound,
    Unauthorized,
)
from cdctl.sim.apiserver.faults import FaultPlan
from cdctl.sim.apiserver.identity import TokenError, UserInfo, user_for_authorization
from cdctl.sim.apiserver.patch import parse_body
from cdctl.sim.apiserver.proxy import PodNetwork, PodProxy
from cdctl.sim.apiserver.queryparams import is_true, non_negative_int
from cdctl.sim.apiserver.rbac import Rbac
from cdctl.sim.apiserver.requestcounts import REQUEST_USER
from cdctl.sim.apiserver.resources import ResourceType
from cdctl.sim.apiserver.selectors import object_filter, parse_field_selector, parse_label_selector
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.apiserver.tables import as_table, wants_table
from cdctl.sim.apiserver.watchstream import serve_watch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """A parsed resource path."""

    resource_type: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def error_response(error: ApiError) -> web.Response:
    response = _json(error.status_body(), status=error.code)
    if error.code == 429:
        response.headers["Retry-After"] = "1"
    return response


class ApiRoutes:
    """Request handlers bound to one store, settings and fault plan."""

    def __init__(
        self,
        store: ObjectStore,
        settings: ServerSettings,
        faults: FaultPlan,
        network: PodNetwork | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.faults = faults
        self.proxy = PodProxy(store, network or PodNetwork())

    # ---- routing -------------------------------------------------------------------------------------------
    def parse_target(self, group: str, version: str, rest: list[str]) -> Target:
        registry = self.store.registry
        if not rest:
            raise NotFound("the server could not find the requested resource")
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespaced = registry.find(group, version, rest[2])
            if namespaced is not None and namespaced.namespaced:
                if len(rest) > 5:
                    raise NotFound("the server could not find the requested resource")
                name = rest[3] if len(rest) > 3 else None
                return Target(namespaced, rest[1], name, rest[4] if len(rest) > 4 else None)
        if len(rest) > 3:
            raise NotFound("the server could not find the requested resource")
        resource_type = registry.get(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        return Target(resource_type, None, name, rest[2] if len(rest) > 2 else None)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method == "GET":
            document = self._discovery(parts)
            if document is not None:
                return _json(document)
            if parts[:2] == ["openapi", "v3"]:
                found = self._openapi(parts[2:])
                if found is None:
                    raise NotFound("the server could not find the requested resource")
                return _json(found)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 7 and parts[4:7:2] == ["pods", "proxy"]:
            tail = request.path.split("/proxy/", 1)[1] if "/proxy/" in request.path else ""
            return await self.proxy.forward(request, parts[3], parts[5], tail)
        if parts[:4] == ["apis", *authn.TOKEN_REVIEW_PATH[1:]] and request.method == "POST":
            body, _ = await self._body(request)
            return _json(authn.token_review(body), status=201)
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            target = self.parse_target("", "v1", parts[2:])
        elif len(parts) >= 3 and parts[0] == "apis":
            target = self.parse_target(parts[1], parts[2], parts[3:])
        else:
            raise NotFound("the server could not find the requested resource")
        return await self._serve(request, target)

    def _openapi(self, parts: list[str]) -> dict[str, Any] | None:
        if not parts:
            return openapi.root(self.store.registry)
        return openapi.group_version(self.store.registry, "/".join(parts))

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        registry = self.store.registry
        if parts == ["version"]:
            return discovery.SERVER_VERSION
        if parts == ["api"]:
            return discovery.core_versions(f"{self.settings.host}:{self.settings.port}")
        if parts == ["apis"]:
            return discovery.api_group_list(registry)
        if len(parts) == 2 and parts[0] == "apis":
            return discovery.api_group(registry, parts[1])
        if parts == ["api", "v1"]:
            return discovery.api_resource_list(registry, "", "v1")
        if len(parts) == 3 and parts[0] == "apis":
            return discovery.api_resource_list(registry, parts[1], parts[2])
        return None

    # ---- verbs ---------------------------------------------------------------------------------------------
    async def _serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        method = request.method
        if target.subresource is not None:
            return await self._serve_subresource(request, target)
        if target.name is None:
            if method == "GET" and is_true(request.query.get("watch")):
                return await serve_watch(
                    request,
                    self.store,
                    target.resource_type,
                    target.namespace,
                    self._filter(request, target.resource_type),
                    self.settings,
                )
            if method == "GET":
                return self._list(request, target)
            if method == "POST":
                return await self._create(request, target)
            if method == "DELETE":
                return self._delete_collection(request, target)
            raise MethodNotAllowed(f"{method} is not supported on a collection")
        if method == "GET":
            return self._respond(request, target, self._read(target))
        if method == "PUT":
            return await self._update(request, target)
        if method == "PATCH":
            return await self._patch(request, target)
        if method == "DELETE":
            return await self._delete(request, target)
        raise MethodNotAllowed(f"{method} is not supported on an object")

    async def _serve_subresource(self, request: web.Request, target: Target) -> web.StreamResponse:
        resource_type = target.resource_type
        if (
            target.subresource == "binding"
            and resource_type.storage_key == ("", "pods")
            and request.method == "POST"
        ):
            return await self._bind(request, target)
        if (
            target.subresource == "token"
            and resource_type.storage_key == ("", "serviceaccounts")
            and request.method == "POST"
        ):
            assert target.name is not None
            body, _ = await self._body(request)
            answer = authn.token_request(self.store, self._namespace(target), target.name, body)
            return _json(answer, status=201)
        if target.subresource != "status" or not resource_type.status_subresource:
            raise NotFound("the server could not find the requested resource")
        if request.method == "GET":
            return self._respond(request, target, self._read(target))
        if request.method == "PUT":
            return await self._update(request, target)
        if request.method == "PATCH":
            return await self._patch(request, target)
        raise MethodNotAllowed(f"{request.method} is not supported on the status subresource")

    def _storage(self, target: Target) -> ResourceType:
        return self.store.type_of(target.resource_type.group, target.resource_type.plural)

    def _namespace(self, target: Target) -> str:
        if target.resource_type.namespaced and target.name is not None and target.namespace is None:
            raise NotFound("the server could not find the requested resource")
        return target.namespace or ""

    def _out(self, target: Target, obj: dict[str, Any]) -> dict[str, Any]:
        return convert(obj, self._storage(target), target.resource_type)

    def _in(self, target: Target, obj: Any) -> Any:
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        return convert(obj, target.resource_type, self._storage(target))

    def _respond(
        self, request: web.Request, target: Target, obj: dict[str, Any], status: int = 200
    ) -> web.Response:
        body = self._out(target, obj)
        if wants_table(request.headers.get("Accept", "")):
            return _json(as_table([body], self.store.resource_version, target.resource_type))
        return _json(body, status)

    def _read(self, target: Target) -> dict[str, Any]:
        """The stored object itself: a read only serializes it (`_respond` converts into a new dict)."""
        assert target.name is not None
        return self.store.peek(self._storage(target), self._namespace(target), target.name)

    def _filter(self, request: web.Request, resource_type: ResourceType) -> Any:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), resource_type)
        return object_filter(labels, fields)

    def _list(self, request: web.Request, target: Target) -> web.Response:
        items, resource_version = self.store.list_objects(
            self._storage(target),
            target.namespace,
            self._filter(request, target.resource_type),
            copies=False,  # only serialized (`_out` converts each into a new dict)
        )
        offset, resource_version = _decode_continue(request.query.get("continue"), resource_version)
        items = items[offset:]
        metadata: dict[str, Any] = {"resourceVersion": resource_version}
        limit = non_negative_int(request.query.get("limit"), "limit")
        if limit and len(items) > limit:
            metadata["continue"] = _encode_continue(offset + limit, resource_version)
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        converted = [self._out(target, item) for item in items]
        if wants_table(request.headers.get("Accept", "")):
            return _json(as_table(converted, resource_version, target.resource_type))
        return _json(_list_body(target.resource_type, metadata, converted))

    @staticmethod
    def _user(request: web.Request) -> UserInfo:
        try:
            return user_for_authorization(request.headers.get("Authorization"))
        except TokenError as error:
            raise Unauthorized(str(error)) from error

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if request.method == "PATCH":
            return parse_body(raw, content_type), content_type
        if content_type == protobuf.CONTENT_TYPE:
            return protobuf.decode(raw), content_type
        try:
            return orjson.loads(raw or b"null"), content_type
        except ValueError as error:
            raise BadRequest(f"error decoding request body: {error}") from error

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        body, _ = await self._body(request)
        created = self.store.create(
            self._storage(target),
            target.namespace or "",
            self._in(target, body),
            dry_run=bool(request.query.get("dryRun")),
            user=self._user(request),
            served=target.resource_type,
            strict=_strict(request),
        )
        return self._respond(request, target, created, status=201)

    async def _update(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        body, _ = await self._body(request)
        updated = self.store.update(
            self._storage(target),
            self._namespace(target),
            target.name,
            self._in(target, body),
            subresource=target.subresource,
            dry_run=bool(request.query.get("dryRun")),
            user=self._user(request),
            served=target.resource_type,
            strict=_strict(request),
        )
        return self._respond(request, target, updated)

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        body, content_type = await self._body(request)
        if content_type == "application/apply-patch+yaml" and not request.query.get("fieldManager"):
            raise BadRequest(
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch"
            )
        if isinstance(body, dict) and ("apiVersion" in body or "kind" in body):
            body = self._in(target, body)
        patched = self.store.patch(
            self._storage(target),
            self._namespace(target),
            target.name,
            body,
            content_type,
            subresource=target.subresource,
            dry_run=bool(request.query.get("dryRun")),
            user=self._user(request),
            served=target.resource_type,
            strict=_strict(request),
        )
        return self._respond(request, target, patched)

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        options, _ = await self._body(request)
        options = options if isinstance(options, dict) else {}
        propagation = request.query.get("propagationPolicy") or options.get("propagationPolicy")
        grace = request.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        deleted = self.store.delete(
            self._storage(target),
            self._namespace(target),
            target.name,
            propagation=propagation,
            preconditions=options.get("preconditions"),
            dry_run=bool(request.query.get("dryRun") or options.get("dryRun")),
            user=self._user(request),
            served=target.resource_type,
            grace_period_s=grace_period_option(grace),
        )
        return self._respond(request, target, deleted)

    def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        deleted = self.store.delete_collection(
            self._storage(target),
            target.namespace,
            self._filter(request, target.resource_type),
            user=self._user(request),
            served=target.resource_type,
        )
        items = [self._out(target, item) for item in deleted]
        metadata = {"resourceVersion": self.store.resource_version}
        return _json(_list_body(target.resource_type, metadata, items))

    async def _bind(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        body, _ = await self._body(request)
        node = ((body or {}).get("target") or {}).get("name")
        if not node:
            raise BadRequest("binding target name is required")
        pods = self._storage(target)
        pod = self.store.get(pods, self._namespace(target), target.name)
        if pod["spec"].get("nodeName"):
            raise Conflict(f'pod {target.name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        pod["spec"]["nodeName"] = node
        self.store.update(
            pods, self._namespace(target), target.name, pod, subresource="binding", user=self._user(request)
        )
        # The API server answers a Status, which typed clients cannot decode as a Binding: echo the binding.
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            **{k: v for k, v in body.items() if k not in ("apiVersion", "kind")},
        }
        return _json(binding, status=201)


def _strict(request: web.Request) -> bool:
    """Whether the request asks for strict field validation (kubectl's default: `fieldValidation=Strict`)."""
    return request.query.get("fieldValidation") == "Strict"


def _list_body(
    resource_type: ResourceType, metadata: dict[str, Any], items: list[dict[str, Any]]
) -> dict[str, Any]:
    """A list as a real API server writes it: a built-in list's items are typed and carry no kind or
    apiVersion; a custom-resource list (unstructured) keeps them and always has `metadata.continue`."""
    if resource_type.builtin:
        for item in items:  # each a new dict made by _out
            item.pop("kind", None)
            item.pop("apiVersion", None)
    else:
        metadata.setdefault("continue", "")
    return {
        "kind": resource_type.list_kind,
        "apiVersion": resource_type.api_version,
        "metadata": metadata,
        "items": items,
    }


def _encode_continue(offset: int, resource_version: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset, "rv": resource_version}).encode()).decode()


def _decode_continue(token: str | None, resource_version: str) -> tuple[int, str]:
    if not token:
        return 0, resource_version
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(decoded["o"]), str(decoded["rv"])
    except (ValueError, KeyError, TypeError) as error:
        raise BadRequest(f"continue key is not valid: {error}") from error


def build_app(
    store: ObjectStore,
    settings: ServerSettings,
    faults: FaultPlan,
    rbac: Rbac | None = None,
    audit: AuditLog | None = None,
    network: PodNetwork | None = None,
) -> web.Application:
    routes = ApiRoutes(store, settings, faults, network)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def handle(request: web.Request) -> web.StreamResponse:
        if audit is None:
            return await serve(request)
        entry = audit.record(
            request.headers.get("Authorization"), request.method, request.path, request.query
        )
        response = await serve(request)
        entry.code = response.status
        return response

    async def serve(request: web.Request) -> web.StreamResponse:
        decision = faults.decide(request.path, is_true(request.query.get("watch")))
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if decision.error is not None:
            return error_response(decision.error)
        try:
            # Every request is authenticated, whether or not RBAC is enforced: a forged, expired or
            # other-audience token is a 401 on reads too.
            request[REQUEST_USER] = ApiRoutes._user(request).username  # who asked, for the request counts
        except Unauthorized as error:
            return error_response(error)
        if rbac is not None:
            denied = rbac.check_request(
                request.headers.get("Authorization"), request.method, request.path, request.query
            )
            if denied is not None:
                return error_response(denied)
        try:
            return await routes.dispatch(request)
        except ApiError as error:
            return error_response(error)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as error:
            log.exception("simulated API server: unexpected error on %s %s", request.method, request.path)
            return error_response(InternalError(f"{type(error).__name__}: {error}"))

    async def close_proxy(_: web.Application) -> None:
        await routes.proxy.close()

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.on_cleanup.append(close_proxy)
    for path in ("/healthz", "/readyz", "/livez"):
        app.router.add_get(path, health)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def grace_period_option(value: object) -> int | None:
    """DeleteOptions.gracePeriodSeconds, from the query or the body."""
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        raise BadRequest(f"invalid value for gracePeriodSeconds: {value!r}: must be an integer") from None
