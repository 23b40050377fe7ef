"""The ping-pong topology of VDAF-08 §5.8 for one-round Prio3, a batch of reports at a time.

DAP-09 runs Prio3 preparation in one HTTP round trip (DAP-09 §4.5.1):
- the leader's `leader_init` sends `initialize(prep_share)` for each report;
- the helper's `helper_init` combines both prep shares into the prep message, finishes, and
  answers `finish(prep_msg)`;
- the leader's `leader_continued` finishes on that message.
Any other message, or a message that does not parse, rejects that report only.

VDAF-20 §5.7 keeps these messages byte for byte and adds the application context `ctx` to the
functions, which pass it to Prio3 (VDAF-08 has none: leave it empty).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.codec import DecodeError
from shared.dap.messages import MessageType, PingPongMessage
from shared.vdaf.prio3 import PrepBatch, PrepStatus, Prio3


def leader_init(
    vdaf: Prio3,
    verify_key: bytes,
    nonces: Sequence[bytes],
    public_shares: Sequence[bytes],
    input_shares: Sequence[bytes],
    ctx: bytes = b"",
) -> tuple[PrepBatch, list[bytes | None]]:
    """The leader's state and outbound `initialize` message per report (None if rejected)."""
    batch = vdaf.prep_init_batch(verify_key, 0, nonces, public_shares, input_shares, ctx)
    outbound = [
        PingPongMessage.encode_one(MessageType.INITIALIZE, share) if ok else None
        for ok, share in zip(batch.ok, batch.prep_shares, strict=True)
    ]
    return batch, outbound


def helper_init(
    vdaf: Prio3,
    verify_key: bytes,
    nonces: Sequence[bytes],
    public_shares: Sequence[bytes],
    input_shares: Sequence[bytes],
    inbound: Sequence[bytes],
    ctx: bytes = b"",
) -> tuple[PrepBatch, list[bytes | None]]:
    """The helper's finished batch and outbound `finish` message per report (None if rejected).

    Reports whose output share is valid are those with `batch.ok`; their output shares are in
    `batch.out_shares`. An inbound message that does not parse marks the report DECODE_ERROR;
    one of the wrong type, or a failed proof, PREP_ERROR.
    """
    batch = vdaf.prep_init_batch(verify_key, 1, nonces, public_shares, input_shares, ctx)
    leader_shares: list[bytes | None] = []
    for r, payload in enumerate(inbound):
        try:
            share = PingPongMessage.one_field(payload, MessageType.INITIALIZE)
        except DecodeError:
            _reject(batch, r, PrepStatus.DECODE_ERROR)
            share = None
        else:
            if share is None:
                _reject(batch, r, PrepStatus.PREP_ERROR)
        leader_shares.append(share)

    ok = batch.ok
    combinable = [r for r in range(len(inbound)) if ok[r] and leader_shares[r] is not None]
    combined = vdaf.prep_shares_to_prep_batch(
        [[leader_shares[r] or b"", batch.prep_shares[r]] for r in combinable], ctx
    )
    prep_msgs: list[bytes | None] = [None] * len(inbound)
    for r, msg in zip(combinable, combined, strict=True):
        prep_msgs[r] = msg
    finished = vdaf.prep_next_batch(batch, prep_msgs)
    outbound = [
        PingPongMessage.encode_one(MessageType.FINISH, msg) if done and msg is not None else None
        for done, msg in zip(finished, prep_msgs, strict=True)
    ]
    return batch, outbound


def leader_continued(
    vdaf: Prio3, batch: PrepBatch, inbound: Sequence[bytes | None]
) -> npt.NDArray[np.bool_]:
    """Finish the leader's batch on the helper's messages; which reports are finished.

    `inbound[r]` is None when the helper rejected report r.
    """
    prep_msgs: list[bytes | None] = []
    for r, payload in enumerate(inbound):
        try:
            msg = (
                None if payload is None else PingPongMessage.one_field(payload, MessageType.FINISH)
            )
        except DecodeError:
            msg = None
        if msg is None and batch.status[r] == PrepStatus.OK:
            _reject(batch, r, PrepStatus.PREP_ERROR)
        prep_msgs.append(msg)
    return vdaf.prep_next_batch(batch, prep_msgs)


def _reject(batch: PrepBatch, index: int, status: PrepStatus) -> None:
    if batch.status[index] == PrepStatus.OK:
        batch.status[index] = status
    batch.out_shares[index] = 0
