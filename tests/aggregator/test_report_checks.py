"""What `services.aggregator.report_checks` hands on about a share that passed."""

from __future__ import annotations

from services.aggregator.datastore import TokenSpend
from services.aggregator.report_checks import Accepted


def test_an_accepted_share_keeps_its_payload_out_of_its_repr() -> None:
    """A checked share's payload is an input share: a log line that shows the record must not
    show it: nothing secret is logged."""
    payload = bytes(range(40))
    spend = TokenSpend(b"k" * 32, b"c" * 32, b"n" * 32)
    for accepted in (Accepted(payload, None, 1_700_000_000), Accepted(payload, spend, 7)):
        shown = repr(accepted)
        assert payload.hex() not in shown
        assert repr(payload)[2:-1] not in shown
        assert str(accepted.time_s) in shown
        assert accepted.payload == payload
