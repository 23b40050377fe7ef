"""The token issuer's and attester's Prometheus metrics (`services.common.metrics`).

In process, where they happen: tokens issued by key epoch and refused TokenRequests by reason
(issuer); enrolments, refused enrolments by reason, and token requests by outcome, quota
refusals (HTTP 429) among them (attester). From the stores at scrape time: the issuer's keys
(epoch, whether it issues now, expiry) and the attester's enrolled devices and the tokens
charged in the current quota window, summed over every replica.

Nothing identifying is a label: no device id, no key id, no token.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.common.clock import Clock
from services.token_issuer.attester import AttesterService
from services.token_issuer.issuer import IssuerService

__all__ = ["AttesterCounts", "IssuerKeys", "TokenIssuerMetrics"]


class IssuerKeys(Collector):
    """The issuer's key ring at scrape time: the keys in the directory, by epoch."""

    def __init__(self, issuer: IssuerService, clock: Clock) -> None:
        self.issuer = issuer
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        expiry = GaugeMetricFamily(
            "sagg_token_issuer_key_expiry_timestamp_seconds",
            "When each published key stops verifying (UNIX time), by epoch.",
            labels=["epoch"],
        )
        issuing = GaugeMetricFamily(
            "sagg_token_issuer_key_issuing",
            "1 for the keys that sign token requests now, 0 for keys kept for verification.",
            labels=["epoch"],
        )
        now = self.clock.now()
        for key in self.issuer.ring().keys:
            expiry.add_metric([str(key.epoch)], key.expires)
            issuing.add_metric([str(key.epoch)], int(key.issuing(now)))
        yield from (expiry, issuing)


class AttesterCounts(Collector):
    """The attester's store at scrape time: devices, and tokens charged in this quota window."""

    def __init__(self, attester: AttesterService) -> None:
        self.attester = attester

    def collect(self) -> Iterator[Metric]:
        counts = self.attester.counts()
        yield GaugeMetricFamily("sagg_attester_devices", "Enrolled devices.", counts.devices)
        yield GaugeMetricFamily(
            "sagg_attester_window_tokens",
            "Tokens charged to devices in the current quota window (all replicas).",
            counts.window_tokens,
        )


@dataclass(frozen=True)
class TokenIssuerMetrics:
    registry: CollectorRegistry
    #: Label epoch: the key schedule's epoch of the signing key.
    issued: Counter
    #: Label reason: `IssuanceError.reason`.
    issuance_errors: Counter
    #: Label outcome: ``created`` or ``known`` (a re-enrolment).
    enrolments: Counter
    #: Label reason: `DeviceAuthError.reason`.
    enrolment_refusals: Counter
    #: Label outcome: ``issued``, ``quota_exceeded``, ``auth_failed``, ``issuer_refused``,
    #: ``issuer_unavailable``, ``bad_request``.
    token_requests: Counter

    @classmethod
    def create(cls) -> TokenIssuerMetrics:
        registry = CollectorRegistry()
        return cls(
            registry,
            Counter(
                "sagg_token_issuer_tokens_issued_total",
                "Tokens issued (blind signatures), by key epoch.",
                ("epoch",),
                registry=registry,
            ),
            Counter(
                "sagg_token_issuer_issuance_errors_total",
                "TokenRequests the issuer refused, by reason.",
                ("reason",),
                registry=registry,
            ),
            Counter(
                "sagg_attester_enrolments_total",
                "Accepted device enrolments: new devices, or known ones again.",
                ("outcome",),
                registry=registry,
            ),
            Counter(
                "sagg_attester_enrolment_refusals_total",
                "Refused device enrolments, by reason.",
                ("reason",),
                registry=registry,
            ),
            Counter(
                "sagg_attester_token_requests_total",
                "Token requests of devices by outcome (quota_exceeded: HTTP 429).",
                ("outcome",),
                registry=registry,
            ),
        )
