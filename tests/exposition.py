"""Reading the Prometheus text that the services' `GET /metrics` write, for assertions."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

_HISTOGRAM = ("_bucket", "_sum", "_count", "_created")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition; fails on a line that is neither a comment nor a sample,
    on a family without HELP and TYPE before its samples, and on a repeated sample."""
    samples: Samples = {}
    declared: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            # A histogram's samples are its buckets, sum and count.
            suffixes = _HISTOGRAM if kind == "histogram" else ("",)
            declared.update(family + suffix for suffix in suffixes)
            continue
        if line.startswith("#") or not line:
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        assert name in declared, f"{name} has no # TYPE line before it"
        pairs = frozenset(_LABEL.findall(labels or ""))
        key = (name, pairs)
        assert key not in samples, f"repeated sample {line!r}"
        samples[key] = float(value)
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value, 0 when absent (a counter that never moved is not written)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
