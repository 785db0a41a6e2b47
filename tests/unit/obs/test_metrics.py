"""The loop-side counters and histograms expose exactly what prometheus_client's own types expose."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from hookgate.obs.metrics import LoopCounter, LoopHistogram, Metrics

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LABELS = st.sampled_from([("hooks", "wake"), ("hooks", "agent"), ("webhooks", "ci")])


def _exposition(registry: CollectorRegistry) -> list[str]:
    # prometheus_client's Counter also exports a `_created` timestamp, which the loop counter leaves out
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


@given(st.lists(st.tuples(LABELS, st.floats(min_value=0, max_value=30, allow_nan=False)), max_size=60))
def test_loop_histogram_matches_prometheus_histogram(observations: list[tuple[tuple[str, str], float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    hist = LoopHistogram("x_seconds", "doc", ["surface", "route"], BUCKETS, ours)
    ref = Histogram("x_seconds", "doc", ["surface", "route"], buckets=BUCKETS, registry=theirs)
    for labels, value in observations:
        hist.observe(labels, value)
        ref.labels(*labels).observe(value)
    assert _exposition(ours) == _exposition(theirs)


@given(st.lists(st.tuples(LABELS, st.integers(min_value=1, max_value=5)), max_size=40))
def test_loop_counter_matches_prometheus_counter(increments: list[tuple[tuple[str, str], int]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = LoopCounter("y_total", "doc", ["surface", "route"], ours)
    ref = Counter("y_total", "doc", ["surface", "route"], registry=theirs)
    for labels, n in increments:
        counter.inc(labels, n)
        ref.labels(*labels).inc(n)
    assert _exposition(ours) == _exposition(theirs)


def test_observe_request_counts_status_and_latency() -> None:
    m = Metrics()
    m.observe_request("hooks", "wake", 200, 0.0007)
    m.observe_request("hooks", "wake", 200, 0.003)
    m.observe_request("hooks", "wake", 401, 0.0001)
    get = m.registry.get_sample_value
    assert get("hookgate_requests_total", {"surface": "hooks", "route": "wake", "status": "200"}) == 2
    assert get("hookgate_requests_total", {"surface": "hooks", "route": "wake", "status": "401"}) == 1
    assert get("hookgate_ingest_latency_seconds_count", {"surface": "hooks", "route": "wake"}) == 3
    assert get("hookgate_ingest_latency_seconds_bucket", {"surface": "hooks", "route": "wake", "le": "0.001"}) == 2
