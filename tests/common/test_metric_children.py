"""`services.common.metric_children.child`: the same child as `labels()`, counted in the
family's exposition under the right label values."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from services.common.metric_children import child


def test_child_is_the_labelled_child_and_is_kept() -> None:
    registry = CollectorRegistry()
    family = Counter("sagg_test_events", "events", ("kind", "outcome"), registry=registry)
    first = child(family, "upload", "ok")
    assert first is child(family, "upload", "ok")
    assert first is family.labels("upload", "ok")
    assert child(family, "upload", "refused") is not first


def test_counts_land_under_their_label_values() -> None:
    registry = CollectorRegistry()
    counter = Counter("sagg_test_requests", "requests", ("outcome",), registry=registry)
    histogram = Histogram("sagg_test_seconds", "seconds", ("tx",), registry=registry)
    for _ in range(3):
        child(counter, "issued").inc()
    child(counter, "quota").inc()
    child(histogram, "enroll").observe(0.25)
    assert registry.get_sample_value("sagg_test_requests_total", {"outcome": "issued"}) == 3
    assert registry.get_sample_value("sagg_test_requests_total", {"outcome": "quota"}) == 1
    assert registry.get_sample_value("sagg_test_seconds_count", {"tx": "enroll"}) == 1
    assert registry.get_sample_value("sagg_test_seconds_sum", {"tx": "enroll"}) == 0.25
    assert b'sagg_test_requests_total{outcome="issued"} 3.0' in generate_latest(registry)


def test_families_with_the_same_values_are_apart() -> None:
    registry = CollectorRegistry()
    one = Counter("sagg_test_one", "one", ("outcome",), registry=registry)
    two = Counter("sagg_test_two", "two", ("outcome",), registry=registry)
    child(one, "ok").inc()
    assert registry.get_sample_value("sagg_test_one_total", {"outcome": "ok"}) == 1
    assert registry.get_sample_value("sagg_test_two_total", {"outcome": "ok"}) is None
    assert child(two, "ok") is not child(one, "ok")
