"""The delivery job against a real SQLite file and real loopback receivers, with an injected clock.

Retry timing is asserted on the clock the job is given (no sleeps): each attempt's ``nextAttemptAt``,
when the job becomes claimable again, per-target ordering, dead letters and their summary events,
and split texts whose parts are never sent twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest_asyncio
from receiver import Receiver

from hookgate.channels.registry import build_adapter
from hookgate.clock import ManualClock, new_id
from hookgate.config.loader import load_settings
from hookgate.config.settings import Settings
from hookgate.obs.logging import get_logger
from hookgate.obs.metrics import Metrics
from hookgate.runtime.deliveries import DeliveryContext, retry_delay_ms, run_delivery
from hookgate.store import open_store
from hookgate.store.base import DeliveryRecord, NewRun, Store

INSTANCE = "test-instance"


@dataclass
class Harness:
    store: Store
    settings: Settings
    clock: ManualClock
    http: httpx.AsyncClient
    jitter: float = 0.0

    def ctx(self) -> DeliveryContext:
        return DeliveryContext(settings=self.settings, store=self.store, clock=self.clock, metrics=Metrics(),
                               instance=INSTANCE, adapter_for=lambda cfg: build_adapter(cfg, self.http),
                               log=get_logger(), jitter=lambda: self.jitter)

    async def add(self, channel: str, to: str, text: str, *, name: str = "Deploy", inputs: dict[str, Any] | None = None
                  ) -> str:
        """A finished hook run with a pending delivery, committed together like the runtime does."""
        run = NewRun(run_id=new_id(), kind="hook", agent_id="main", session_key="agent:main:hook:x", name=name,
                     inputs={"message": "m", "channel": channel, "wakeMode": "now", **(inputs or {})},
                     created_at=self.clock.now_ms())
        delivery = DeliveryRecord(new_id(), run.run_id, "main", channel, to, text, "pending")
        now = self.clock.now_ms()

        def commit(tx: Any) -> None:
            tx.enqueue_run(run)
            tx.finish_run(run.run_id, "ok", text, None, now)
            tx.record_delivery(delivery, now)

        await self.store.flow_write(commit)
        return delivery.delivery_id

    async def tick(self) -> list[str]:
        """What a worker tick does: claim every due delivery, run them concurrently."""
        now = self.clock.now_ms()
        ids = [d for d, _ in await self.store.flow_write(lambda tx: tx.claim_deliveries(INSTANCE, now, now + 30_000, 16))]
        await asyncio.gather(*(run_delivery(self.ctx(), d) for d in ids))
        return list(ids)

    async def delivery(self, delivery_id: str) -> dict[str, Any]:
        def read(tx: Any) -> dict[str, Any]:
            job = tx.get_delivery(delivery_id)
            [row] = [d for d in tx.run_deliveries(job.run_id) if d["deliveryId"] == delivery_id]
            return row  # type: ignore[no-any-return]

        return await self.store.flow_read(read)

    async def events(self) -> list[tuple[str, str]]:
        def read(tx: Any) -> list[tuple[str, str]]:
            return [(r[0], r[1]) for r in tx._conn.execute("SELECT session_key, text FROM system_events ORDER BY seq")]

        return await self.store.flow_read(read)


def write_config(tmp: Path, channels: dict[str, Any]) -> Settings:
    path = tmp / "hookgate.json5"
    path.write_text(json.dumps({"storage": {"sqlite": {"path": str(tmp / "hookgate.db")}}, "channels": channels}))
    return load_settings(str(path), {})


@pytest_asyncio.fixture
async def make(tmp_path: Path) -> AsyncIterator[Callable[[dict[str, Any]], Any]]:
    opened: list[Harness] = []

    async def factory(channels: dict[str, Any]) -> Harness:
        settings = write_config(tmp_path, channels)
        clock = ManualClock()
        store = open_store(settings.storage, clock=clock)
        await store.open("serve")
        h = Harness(store, settings, clock, httpx.AsyncClient())
        opened.append(h)
        return h

    yield factory
    for h in opened:
        await h.http.aclose()
        await h.store.close()


def test_retry_delays_follow_the_schedule_with_jitter_and_retry_after() -> None:
    assert [retry_delay_ms(n, None, 0.0) for n in range(1, 7)] == [1000, 5000, 30000, 120000, 600000, 600000]
    assert retry_delay_ms(1, None, 1.0) == 1200 and retry_delay_ms(1, None, -1.0) == 800
    assert retry_delay_ms(3, None, 0.5) == 33000
    assert retry_delay_ms(1, 42.0, 1.0) == 42000  # Retry-After replaces the backoff, no jitter
    assert retry_delay_ms(1, 3600.0, 0.0) == 600000  # honoured up to 10 min


async def test_retryable_failures_wait_then_deliver(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"webhook": {"url": receiver.url + "/in"}})
    h.jitter = 1.0  # +20 %
    receiver.script = [(503, {}), (500, {})]
    d = await h.add("webhook", "ops", "hello")
    t0 = h.clock.now_ms()
    assert await h.tick() == [d]
    row = await h.delivery(d)
    assert (row["status"], row["attempts"], row["nextAttemptAt"]) == ("pending", 1, t0 + 1200)
    assert row["lastError"].startswith("webhook: HTTP 503")
    # the backlog gauge counts due, unclaimed deliveries: one waiting out its backoff is not due
    assert await h.store.flow_read(lambda tx: tx.due_deliveries(h.clock.now_ms())) == 0
    h.clock.advance(1.199)
    assert await h.tick() == []  # not due yet
    h.clock.advance(0.001)
    assert await h.store.flow_read(lambda tx: tx.due_deliveries(h.clock.now_ms())) == 1
    assert await h.tick() == [d]
    row = await h.delivery(d)
    assert (row["status"], row["attempts"], row["nextAttemptAt"]) == ("pending", 2, t0 + 1200 + 6000)
    h.clock.advance(6.0)
    assert await h.tick() == [d]
    row = await h.delivery(d)
    assert (row["status"], row["attempts"]) == ("delivered", 3)
    assert [(a["outcome"], a["httpStatus"]) for a in row["attemptLog"]] == [
        ("retry", 503), ("retry", 500), ("delivered", 200)]  # model.md §10.4: every attempt's HTTP status
    assert len(receiver.received) == 3
    assert await h.events() == []  # delivered: no summary
    assert await h.tick() == []  # never sent again


async def test_retry_after_is_honoured(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"webhook": {"url": receiver.url}})
    receiver.script = [(429, {"Retry-After": "42"})]
    d = await h.add("webhook", "ops", "hello")
    t0 = h.clock.now_ms()
    await h.tick()
    assert (await h.delivery(d))["nextAttemptAt"] == t0 + 42_000
    h.clock.advance(41.9)
    assert await h.tick() == []
    h.clock.advance(0.1)
    assert await h.tick() == [d]
    assert (await h.delivery(d))["status"] == "delivered"


async def test_non_retryable_failure_is_dead_and_posts_the_summary(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"webhook": {"url": receiver.url}})
    receiver.script = [(400, {})]
    d = await h.add("webhook", "ops", "The build is green.", name="CI")
    await h.tick()
    row = await h.delivery(d)
    assert (row["status"], row["attempts"], row["nextAttemptAt"]) == ("dead", 1, None)
    assert row["attemptLog"][0]["outcome"] == "dead" and row["attemptLog"][0]["httpStatus"] == 400
    assert await h.events() == [("agent:main:main", "Hook CI: The build is green.")]

    def wake_requests(tx: Any) -> list[str]:
        return [r[0] for r in tx._conn.execute("SELECT reason FROM heartbeat_requests")]

    assert await h.store.flow_read(wake_requests) == [f"hook:{(await h.store.flow_read(lambda tx: tx.get_delivery(d))).run_id}"]


async def test_attempts_used_up_make_it_dead(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"webhook": {"url": receiver.url, "retry": {"maxAttempts": 2}}})
    receiver.script = [(503, {}), (503, {}), (503, {})]
    d = await h.add("webhook", "ops", "x", inputs={"wakeMode": "next-heartbeat"})
    await h.tick()
    h.clock.advance(1.0)
    await h.tick()
    row = await h.delivery(d)
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert [a["outcome"] for a in row["attemptLog"]] == ["retry", "dead"]
    assert await h.events() == [("agent:main:main", "Hook Deploy: x")]
    assert len(receiver.received) == 2


async def test_one_target_at_a_time_in_creation_order(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"webhook": {"url": receiver.url}})
    receiver.script = [(503, {})]  # the first delivery to "a" fails once
    a1 = await h.add("webhook", "a", "a1")
    a2 = await h.add("webhook", "a", "a2")
    a3 = await h.add("webhook", "a", "a3")
    assert await h.tick() == [a1]  # only the head of the target's queue
    b1 = await h.add("webhook", "b", "b1")
    assert await h.tick() == [b1]  # a1 waits for its retry and holds back a2, a3 — not b
    assert await h.tick() == []
    h.clock.advance(1.0)
    assert await h.tick() == [a1]
    assert await h.tick() == [a2]
    assert await h.tick() == [a3]
    texts = [body["text"] for _, _, body in receiver.received if body["to"] == "a"]
    assert texts == ["a1", "a1", "a2", "a3"]


async def test_a_replayed_delivery_waits_while_a_later_one_of_its_target_is_in_flight(
        make: Any, receiver: Receiver) -> None:
    """operations.md §4.4: "Deliveries to the same channel and target are sent one at a time". A
    replayed dead delivery keeps its older seq, so it headed its target's queue again and was sent
    while a later delivery to the same chat was still in flight (`hookgate replay` under `serve`)."""
    h: Harness = await make({"webhook": {"url": receiver.url}})
    receiver.script = [(400, {})]  # final: a1 is dead at once
    a1 = await h.add("webhook", "a", "a1")
    assert await h.tick() == [a1]
    assert (await h.delivery(a1))["status"] == "dead"
    a2 = await h.add("webhook", "a", "a2")
    now = h.clock.now_ms()
    # a2 leased by a worker and in flight; then a1 replayed
    assert await h.store.flow_write(lambda tx: tx.claim_deliveries(INSTANCE, now, now + 30_000, 16)) == [(a2, "webhook")]
    assert await h.store.flow_write(lambda tx: tx.requeue_delivery(a1, now))
    assert await h.store.flow_write(lambda tx: tx.claim_deliveries("other", now, now + 30_000, 16)) == []
    await run_delivery(h.ctx(), a2)
    assert await h.tick() == [a1]  # sent once a2 is done: replayed, it goes before later ones
    assert [body["text"] for _, _, body in receiver.received] == ["a1", "a2", "a1"]


async def test_one_channel_takes_at_most_its_share_of_the_delivery_slots(make: Any) -> None:
    """A chat API that hangs for some chats holds each send for its 15 s timeout; 16 such sends
    held every delivery slot of the worker, and every other channel waited. A channel's deliveries
    in flight are capped (the worker's DELIVERY_PER_CHANNEL), counting those already in flight."""
    h: Harness = await make({"webhook": {"url": "http://127.0.0.1:9/"}, "slack": {"botToken": "xoxb-t"}})
    slow = [await h.add("webhook", f"chat-{i}", "x") for i in range(20)]
    other = await h.add("slack", "C1", "y")
    now = h.clock.now_ms()

    def claim(instance: str, busy: dict[str, int]) -> Any:
        return h.store.flow_write(lambda tx: tx.claim_deliveries(instance, now, now + 30_000, 64, per_channel=16,
                                                                  busy=busy))

    first = await claim(INSTANCE, {"webhook": 12})
    assert first == [(d, "webhook") for d in slow[:4]] + [(other, "slack")]
    assert await claim(INSTANCE, {"webhook": 16}) == []
    assert [d for d, _ in await claim("other", {})] == slow[4:]  # another worker has its own slots


async def test_split_parts_already_sent_are_not_sent_again(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"discord": {"botToken": "tok", "apiBaseUrl": receiver.url}})
    text = "\n\n".join(["A" * 1500, "B" * 1500, "C" * 1500])  # discord: 2000 characters per message
    receiver.script = [(200, {}), (503, {})]  # part 1 goes out, part 2 fails
    d = await h.add("discord", "chan1", text)
    await h.tick()
    row = await h.delivery(d)
    assert (row["status"], row["partsSent"], row["messageIds"]) == ("pending", 1, ["m1"])
    h.clock.advance(1.0)
    await h.tick()
    row = await h.delivery(d)
    assert (row["status"], row["partsSent"]) == ("delivered", 3)
    sent = [body["content"][0] for _, _, body in receiver.received]
    assert sent == ["A", "B", "B", "C"]  # A once; B retried; C after it
    assert all(path == "/channels/chan1/messages" for path, _, _ in receiver.received)


async def test_unavailable_channel_and_unresolved_secret_are_dead(make: Any, receiver: Receiver, tmp_path: Path) -> None:
    h: Harness = await make({"telegram": {"botToken": {"source": "env", "provider": "default", "id": "NO_SUCH_VAR"},
                                          "apiBaseUrl": receiver.url}})
    gone = await h.add("slack", "c1", "x")  # slack is not configured (any more)
    tg = await h.add("telegram", "42", "x")
    await h.tick()
    assert (await h.delivery(gone))["lastError"] == "channel slack is not available"
    row = await h.delivery(tg)
    assert row["status"] == "dead" and "botToken" in row["lastError"]
    assert receiver.received == []


async def test_explicit_channel_sets_the_last_route_and_last_does_not(make: Any, receiver: Receiver) -> None:
    h: Harness = await make({"webhook": {"url": receiver.url}})

    def route(tx: Any) -> tuple[str | None, str | None]:
        return tx.last_route("agent:main:main")  # type: ignore[no-any-return]

    await h.add("webhook", "ops", "x", inputs={"channel": "last"})
    await h.tick()
    assert await h.store.flow_read(route) == (None, None)
    await h.add("webhook", "ops-2", "x", inputs={"channel": "webhook"})
    await h.tick()
    assert await h.store.flow_read(route) == ("webhook", "ops-2")
