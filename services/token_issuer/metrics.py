"""The token issuer's and attester's Prometheus metrics (`services.common.metrics`).

In process, where they happen: tokens issued by key epoch and refused TokenRequests by reason
(issuer); enrolments, refused enrolments by reason, and token requests by outcome, quota
refusals (HTTP 429) among them (attester). From the stores at scrape time: the issuer's keys
(epoch, whether it issues now, expiry) and the attester's enrolled devices and the tokens
charged in the current quota window, summed over every replica.

Nothing identifying is a label: no device id, no key id, no token.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.clock import Clock
from services.common.metrics import Counter, Registry, Scrape
from services.token_issuer.attester import AttesterService
from services.token_issuer.issuer import IssuerService

__all__ = ["TokenIssuerMetrics"]


@dataclass(frozen=True)
class TokenIssuerMetrics:
    registry: Registry
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
        registry = Registry()
        return cls(
            registry,
            registry.counter(
                "sagg_token_issuer_tokens_issued_total",
                "Tokens issued (blind signatures), by key epoch.",
                ("epoch",),
            ),
            registry.counter(
                "sagg_token_issuer_issuance_errors_total",
                "TokenRequests the issuer refused, by reason.",
                ("reason",),
            ),
            registry.counter(
                "sagg_attester_enrolments_total",
                "Accepted device enrolments: new devices, or known ones again.",
                ("outcome",),
            ),
            registry.counter(
                "sagg_attester_enrolment_refusals_total",
                "Refused device enrolments, by reason.",
                ("reason",),
            ),
            registry.counter(
                "sagg_attester_token_requests_total",
                "Token requests of devices by outcome (quota_exceeded: HTTP 429).",
                ("outcome",),
            ),
        )

    def read_issuer(self, issuer: IssuerService, clock: Clock) -> None:
        """Scrape the issuer's key ring: the keys in the directory, by epoch."""
        expiry = "sagg_token_issuer_key_expiry_timestamp_seconds"
        self.registry.family(
            expiry,
            "gauge",
            "When each published key stops verifying (UNIX time), by epoch.",
            ("epoch",),
        )
        self.registry.family(
            "sagg_token_issuer_key_issuing",
            "gauge",
            "1 for the keys that sign token requests now, 0 for keys kept for verification.",
            ("epoch",),
        )

        def read(scrape: Scrape) -> None:
            now = clock.now()
            for key in issuer.ring().keys:
                epoch = str(key.epoch)
                scrape.add(
                    "sagg_token_issuer_key_expiry_timestamp_seconds", key.expires, epoch=epoch
                )
                scrape.add("sagg_token_issuer_key_issuing", int(key.issuing(now)), epoch=epoch)

        self.registry.on_scrape(read)

    def read_attester(self, attester: AttesterService) -> None:
        """Scrape the attester's store: devices, and tokens charged in this quota window."""
        self.registry.family("sagg_attester_devices", "gauge", "Enrolled devices.")
        self.registry.family(
            "sagg_attester_window_tokens",
            "gauge",
            "Tokens charged to devices in the current quota window (all replicas).",
        )

        def read(scrape: Scrape) -> None:
            counts = attester.counts()
            scrape.add("sagg_attester_devices", counts.devices)
            scrape.add("sagg_attester_window_tokens", counts.window_tokens)

        self.registry.on_scrape(read)
