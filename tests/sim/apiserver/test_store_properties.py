"""Property: folding the watch history from any retained resourceVersion gives what a list returns."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.store import ObjectStore

NAMES = st.sampled_from(["a", "b", "c", "d"])
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["create", "label", "finalize", "unfinalize", "delete"]), NAMES, st.integers(0, 3)
    ),
    max_size=40,
)


def _apply(store: ObjectStore, operation: str, name: str, value: int) -> None:
    maps = store.type_of("", "configmaps")
    try:
        if operation == "create":
            store.create(maps, "default", {"metadata": {"name": name, "labels": {"v": str(value)}}})
            return
        current = store.get(maps, "default", name)
        if operation == "label":
            current["metadata"]["labels"] = {"v": str(value)}
        elif operation == "finalize":
            current["metadata"]["finalizers"] = ["example.com/hold"]
        elif operation == "unfinalize":
            current["metadata"]["finalizers"] = []
        else:
            store.delete(maps, "default", name)
            return
        store.update(maps, "default", name, current)
    except ApiError:
        pass  # 404 and 409 are part of the game


def _fold(listed: list[dict[str, Any]], events: list[Any]) -> dict[str, dict[str, Any]]:
    state = {obj["metadata"]["name"]: obj for obj in listed}
    for event in events:
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            state.pop(name, None)
        else:
            state[name] = event.obj
    return state


@settings(max_examples=60, deadline=None)
@given(before=OPERATIONS, after=OPERATIONS)
def test_watch_from_a_list_version_converges_to_the_list(
    before: list[tuple[str, str, int]], after: list[tuple[str, str, int]]
) -> None:
    async def scenario() -> None:
        store = ObjectStore(history_window=10_000)
        maps = store.type_of("", "configmaps")
        for operation in before:
            _apply(store, *operation)
        listed, version = store.list_objects(maps, "default")
        watcher = store.watch(maps, "default", since=int(version), droppable=False)
        for operation in after:
            _apply(store, *operation)
        events = []
        while not watcher.queue.empty():
            event = watcher.queue.get_nowait()
            assert event is not None
            events.append(event)
        versions = [int(e.obj["metadata"]["resourceVersion"]) for e in events]
        assert versions == sorted(set(versions))
        final, _ = store.list_objects(maps, "default")
        assert _fold(listed, events) == {o["metadata"]["name"]: o for o in final}

    asyncio.run(scenario())


POD_OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["create", "bind", "finalize", "delete"]), NAMES, st.sampled_from(["n1", "n2"])
    ),
    max_size=40,
)


@given(POD_OPERATIONS)
@settings(max_examples=50, deadline=None)
def test_pods_on_node_is_what_a_list_filtered_by_node_name_returns(
    operations: list[tuple[str, str, str]],
) -> None:
    store = ObjectStore()
    pods = store.type_of("", "pods")
    for operation, name, node in operations:
        try:
            if operation == "create":
                store.create(pods, "default", {"metadata": {"name": name}, "spec": {"containers": []}})
            elif operation == "delete":
                store.delete(pods, "default", name)
            else:
                current = store.get(pods, "default", name)
                if operation == "bind":
                    current["spec"]["nodeName"] = node
                else:
                    current["metadata"]["finalizers"] = ["example.com/hold"]
                store.update(pods, "default", name, current)
        except ApiError:
            pass
        for each in ("n1", "n2"):
            listed, _ = store.list_objects(pods, None, lambda p, n=each: p["spec"].get("nodeName") == n)
            assert store.pods_on_node(each) == listed
