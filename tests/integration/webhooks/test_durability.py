"""Surface A across process boundaries: kill -9 durability (README §9), route secrets from SecretRefs
with skip-and-reload (webhooks.md §1.3) and the rate-limit metrics."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from gateway import GatewayFactory
from routeharness import NOT_FOUND, Api, ci_route, db, exact, webhooks_config


def test_kill9_loses_no_acknowledged_flow_or_revision(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(webhooks_config(limits={"rateLimit": {"windowSeconds": 60, "maxRequests": 100000}}))
    acked: dict[str, int] = {}  # flowId → last acknowledged revision
    in_doubt: set[str] = set()  # flows with a mutation sent but not answered when the process died
    lock = threading.Lock()
    stop = threading.Event()

    def fire(i: int) -> None:
        with gw.client(source=f"127.0.5.{i + 1}") as c:
            api = Api(c)
            while not stop.is_set():
                try:
                    r = api.call("create_flow", goal=f"burst {i}")
                except httpx.HTTPError:
                    return
                if r.status_code != 200:
                    continue
                flow_id = r.json()["result"]["flow"]["flowId"]
                with lock:
                    acked[flow_id] = 0
                for revision in range(3):
                    with lock:
                        in_doubt.add(flow_id)
                    try:
                        r = api.call("set_waiting", flowId=flow_id, expectedRevision=revision, currentStep=f"s{revision}")
                    except httpx.HTTPError:
                        return
                    assert r.status_code == 200, r.text
                    with lock:
                        acked[flow_id] = revision + 1
                        in_doubt.discard(flow_id)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(fire, i) for i in range(6)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a busy machine is slower: wait for enough acknowledgements
            time.sleep(0.05)
            with lock:
                if len(acked) >= 12 and sum(1 for rev in acked.values() if rev == 3) >= 6:
                    break
        gw.kill9()
        stop.set()
        for f in futures:
            f.result()
    assert len(acked) >= 6
    with db(gw) as conn:
        stored = dict(conn.execute("SELECT flow_id, revision FROM flows").fetchall())
    for flow_id, revision in acked.items():
        assert flow_id in stored
        # a mutation in flight when the process died may or may not have committed
        allowed = {revision, revision + 1} if flow_id in in_doubt else {revision}
        assert stored[flow_id] in allowed, (flow_id, revision, stored[flow_id])
    gw.start()
    with gw.client() as c:
        api = Api(c)
        for flow_id in list(acked)[:20]:
            flow = api.flow(flow_id)
            assert flow["revision"] == stored[flow_id]
            if flow["revision"]:
                assert flow["status"] == "waiting" and flow["currentStep"] == f"s{flow['revision'] - 1}"
        assert len(api.result("list_flows")["flows"]) == len(stored)


def write_secrets(path: Path, values: dict[str, Any]) -> None:
    path.write_text(json.dumps(values))
    os.chmod(path, 0o600)


def test_unresolvable_route_secret_skips_the_route_until_reload(gateway_factory: GatewayFactory,
                                                                 tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.json"
    write_secrets(secrets, {"other": "unrelated"})
    os.environ.pop("HG_TEST_UNSET_ROUTE_SECRET", None)
    routes = {
        "ci": ci_route(),
        "envroute": ci_route(path="/plugins/webhooks/env", secret={"source": "env", "id": "HG_TEST_UNSET_ROUTE_SECRET"}),
        "late": ci_route(path="/plugins/webhooks/late", secret={"source": "file", "provider": "vault", "id": "/routes/late"}),
        # with auth.secrets one resolved secret is enough; the others are warned about
        "multi": {"path": "/plugins/webhooks/multi", "sessionKey": "agent:ops:main",
                  "auth": {"secrets": [{"source": "env", "id": "HG_TEST_UNSET_ROUTE_SECRET"}, "multi-secret"]}},
    }
    cfg = webhooks_config(routes, secrets={"providers": {"vault": {"source": "file", "path": str(secrets)}}})
    gw = gateway_factory(cfg)
    assert 'route envroute: skipped (Environment variable "HG_TEST_UNSET_ROUTE_SECRET" is missing or empty.)' in (
        gw.stdout_lines)
    assert f'route late: skipped (File provider "vault" cannot use {secrets}: pointer not found.)' in gw.stdout_lines
    assert f"route ci: POST {gw.url}/plugins/webhooks/ci" in gw.stdout_lines
    assert f"route multi: POST {gw.url}/plugins/webhooks/multi" in gw.stdout_lines
    warning = ('plugins.entries.webhooks.config.routes.multi.auth.secrets[0]: Environment variable '
               '"HG_TEST_UNSET_ROUTE_SECRET" is missing or empty.')
    deadline = time.monotonic() + 3  # log lines are flushed every 100 ms
    while warning not in [e.get("message") for e in gw.log_events()] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert warning in [e.get("message") for e in gw.log_events() if e.get("event") == "config.warning"]
    with gw.client() as c:
        for path in ("/plugins/webhooks/env", "/plugins/webhooks/late"):
            exact(c.post(path, json={"action": "list_flows"}, headers={"Authorization": "Bearer s3cret"}), 404, NOT_FOUND)
            exact(c.get(path), 404, NOT_FOUND)  # no route: not even a 405
        assert Api(c).call("list_flows").status_code == 200
        assert Api(c, "/plugins/webhooks/multi", {"Authorization": "Bearer multi-secret"}).call(
            "list_flows").status_code == 200

        write_secrets(secrets, {"routes": {"late": "  late-secret\n"}})
        gw.signal(signal.SIGHUP)
        late = Api(c, "/plugins/webhooks/late", {"Authorization": "Bearer late-secret"})
        deadline = time.monotonic() + 5
        while late.call("list_flows").status_code == 404 and time.monotonic() < deadline:
            time.sleep(0.05)
        r = late.call("create_flow", goal="after reload")
        assert r.status_code == 200 and r.json()["routeId"] == "late"
        assert Api(c, "/plugins/webhooks/late").call("list_flows").status_code == 401  # old literal: wrong
        exact(c.post("/plugins/webhooks/env", json={"action": "list_flows"}), 404, NOT_FOUND)  # still skipped
        assert Api(c).call("list_flows").status_code == 200

        # an empty value counts as unresolvable: the route is skipped again on the next reload
        write_secrets(secrets, {"routes": {"late": "   "}})
        gw.signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while late.call("list_flows").status_code != 404 and time.monotonic() < deadline:
            time.sleep(0.05)
        exact(late.call("list_flows"), 404, NOT_FOUND)
    assert "late-secret" not in gw.stderr() and "late-secret" not in gw.read_stdout()


def test_secret_file_with_insecure_permissions_skips_the_route(gateway_factory: GatewayFactory,
                                                               tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.json"
    write_secrets(secrets, {"late": "late-secret"})
    os.chmod(secrets, 0o644)
    routes = {"ci": ci_route(),
              "late": ci_route(path="/plugins/webhooks/late", secret={"source": "file", "provider": "vault", "id": "/late"})}
    gw = gateway_factory(webhooks_config(routes, secrets={"providers": {"vault": {"source": "file",
                                                                                  "path": str(secrets)}}}))
    assert f'route late: skipped (File provider "vault" cannot use {secrets}: insecure permissions.)' in gw.stdout_lines
    with gw.client() as c:
        exact(Api(c, "/plugins/webhooks/late", {"Authorization": "Bearer late-secret"}).call("list_flows"), 404,
              NOT_FOUND)
        assert Api(c).call("list_flows").status_code == 200


def test_store_unavailable_is_503_commits_nothing_and_stores_no_replay(gateway_factory: GatewayFactory) -> None:
    cfg = webhooks_config()
    cfg["storage"]["sqlite"]["busyTimeoutMs"] = 200
    gw = gateway_factory(cfg)
    with gw.client() as c:
        api = Api(c)
        flow = api.create("before")
        blocker = sqlite3.connect(gw.workdir / "hookgate.db", isolation_level=None, timeout=5)
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock longer than busyTimeoutMs
        try:
            for r in (api.call("create_flow", {"Idempotency-Key": "k503"}, goal="lost?"),
                      api.call("set_waiting", flowId=flow["flowId"], expectedRevision=0),
                      api.call("cancel_flow", flowId=flow["flowId"])):
                exact(r, 503, '{"ok":false,"code":"store_unavailable","error":"store unavailable"}')
                assert r.headers["retry-after"] == "1"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        retry = api.call("create_flow", {"Idempotency-Key": "k503"}, goal="lost?")
        assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers
        assert [f["goal"] for f in api.result("list_flows")["flows"]] == ["lost?", "before"]
        assert api.flow(flow["flowId"]) == flow
