"""Prometheus metrics of operations.md §3, on one private registry (no global state between tests)."""

from __future__ import annotations

import asyncio
import platform
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from hookgate import __version__
from hookgate.obs import logging as obs_logging

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800)


class LoopCounter:
    """A labelled counter for the event loop's per-request paths: plain ints in a dict, turned into
    samples when scraped. (A ``prometheus_client`` child takes a lock per ``inc``; on the loop nothing
    else writes, so the lock and the child lookup are pure cost on every request.) Loop thread only."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, list(labelnames)
        self.values: dict[tuple[str, ...], float] = {}
        self.frozen: dict[tuple[str, ...], float] | None = None  # what a scrape renders, copied on the loop
        registry.register(self)

    def freeze(self) -> None:
        self.frozen = self.values.copy()

    def inc(self, labels: tuple[str, ...], amount: float = 1) -> None:
        values = self.values
        values[labels] = values.get(labels, 0) + amount

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        values = self.values if self.frozen is None else self.frozen
        for labels, value in list(values.items()):
            family.add_metric(list(labels), value)
        yield family


class LoopHistogram:
    """A labelled histogram in the manner of ``LoopCounter``: per series, a count per bucket and the sum."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, list(labelnames)
        self.bounds = [float(b) for b in buckets]
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self.series: dict[tuple[str, ...], list[float]] = {}  # bucket counts (the last one +Inf), then the sum
        self.frozen: dict[tuple[str, ...], list[float]] | None = None  # see LoopCounter
        registry.register(self)

    def freeze(self) -> None:
        self.frozen = {labels: series.copy() for labels, series in self.series.items()}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = [0.0] * (len(self.bounds) + 2)
        series[bisect_left(self.bounds, value)] += 1  # the first bucket whose bound is >= value
        series[-1] += value

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in list((self.series if self.frozen is None else self.frozen).items()):
            counts, total, cumulative = series[:-1], series[-1], 0.0
            buckets = []
            for le, count in zip(self._les, counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(labels), buckets, total)
        yield family


class _LogLinesDropped:
    """``hookgate_log_lines_dropped_total``: log lines the process could not write (stderr closed or
    full, its reader gone) or that waited past what a reader who stopped reading is held."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("hookgate_log_lines_dropped", "Log lines dropped, unwritten",
                                  value=obs_logging.dropped_lines())


class Metrics:
    """Every hookgate metric. One instance per process, created by the server."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self._scraping = asyncio.Lock()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(_LogLinesDropped())
        self.requests = LoopCounter(
            "hookgate_requests_total", "Responses by HTTP status", ["surface", "route", "status"], registry=r
        )
        self.ingest_latency = LoopHistogram(
            "hookgate_ingest_latency_seconds",
            "Request start to response written",
            ["surface", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # rejections come at the rate of the requests (a client without the token, one locked out)
        self.auth_failures = LoopCounter(
            "hookgate_auth_failures_total", "401 responses", ["surface", "route"], registry=r
        )
        self.rate_limited = LoopCounter(
            "hookgate_rate_limited_total", "429 responses", ["surface", "reason"], registry=r
        )
        self.body_rejections = Counter(
            "hookgate_body_rejections_total", "Body and schema rejections", ["surface", "reason"], registry=r
        )
        self.idempotent_replays = Counter(
            "hookgate_idempotent_replays_total", "Replayed responses", ["surface"], registry=r
        )
        self.flow_actions = LoopCounter(
            "hookgate_flow_actions_total", "TaskFlow action outcomes", ["action", "code"], registry=r
        )
        self.system_events = LoopCounter(
            "hookgate_system_events_total", "System event queue activity", ["outcome"], registry=r
        )
        self.queue_backlog = Gauge(
            "hookgate_queue_backlog", "Due jobs not yet claimed", ["queue"], registry=r
        )
        self.runs = Counter("hookgate_runs_total", "Finished runs", ["kind", "status"], registry=r)
        self.run_duration = Histogram(
            "hookgate_run_duration_seconds", "Run start to end", ["kind", "runtime"],
            buckets=_RUN_BUCKETS, registry=r,
        )
        self.heartbeats = Counter("hookgate_heartbeats_total", "Heartbeat turns", ["outcome"], registry=r)
        self.deliveries = Counter(
            "hookgate_deliveries_total", "Delivery attempts and outcomes", ["channel", "status"], registry=r
        )
        self.delivery_latency = Histogram(
            "hookgate_delivery_latency_seconds", "Delivery created to delivered", ["channel"],
            buckets=_RUN_BUCKETS, registry=r,
        )
        self.delivery_attempt = Histogram(
            "hookgate_delivery_attempt_seconds", "One delivery attempt (all parts sent or the failure)",
            ["channel"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.transform_duration = Histogram(
            "hookgate_transform_duration_seconds", "Transform calls", ["mapping"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.store_commit = Histogram(
            "hookgate_store_commit_seconds", "Commit latency (SQLite: per group commit)", ["backend"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.store_group_size = Histogram(
            "hookgate_store_group_size", "Operations per SQLite group commit",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r,
        )
        self.store_errors = Counter(
            "hookgate_store_errors_total", "Failed store operations", ["backend"], registry=r
        )
        self.config_reloads = Counter(
            "hookgate_config_reloads_total", "Config reloads", ["result"], registry=r
        )
        self.secret_resolution_failures = Counter(
            "hookgate_secret_resolution_failures_total", "Unresolved secret inputs", ["source"], registry=r
        )
        self.build_info = Gauge(
            "hookgate_build_info", "Build information", ["version", "python"], registry=r
        )
        self.build_info.labels(version=__version__, python=platform.python_version()).set(1)

    def observe_request(self, surface: str, route: str, status: int, seconds: float) -> None:
        """Count one response and its latency."""
        self.requests.inc((surface, route, str(status)))
        self.ingest_latency.observe((surface, route), seconds)

    def render(self) -> bytes:
        """The exposition text, built here (a test, the CLI): see ``scrape`` for the server's."""
        return generate_latest(self.registry)

    async def scrape(self) -> bytes:
        """The exposition text for ``GET /metrics``: the loop's own counters are copied on the loop,
        then the text is built on a thread. (Built on the loop, a scrape of a gateway with 1 000
        routes — ~20 000 lines, most of them the per-route latency histogram — held every other
        request for 0.13 – 0.38 s.) Scrapes take their turn, so each renders the copy it made."""
        async with self._scraping:
            loop_side = [c for c in vars(self).values() if isinstance(c, (LoopCounter, LoopHistogram))]
            for c in loop_side:
                c.freeze()
            try:
                return await asyncio.to_thread(generate_latest, self.registry)
            finally:
                for c in loop_side:
                    c.frozen = None


_NULL: Metrics | None = None


def null_metrics() -> Metrics:
    """A shared instance for code paths and tests that do not read metrics."""
    global _NULL
    if _NULL is None:
        _NULL = Metrics()
    return _NULL
