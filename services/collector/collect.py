"""The collector's protocol logic, free of HTTP and storage (DAP-09 §4.6, DAP-19 §4.6).

- `CollectQuery`: the collector API's JSON query (times in seconds for both versions), checked
  against the task and turned into a DAP-09 `CollectionReq` (DAP-09 §4.6.1) or a DAP-19
  `CollectionJobReq` (DAP-19 §4.6.1: the interval in time_precision units, the leader-selected
  "next batch" as `current_batch`; DAP-19 has no query by batch id).
- `decrypt_collection`: open both encrypted aggregate shares of a `Collection` (DAP-09 §4.6.4)
  and unshard them (DAP-09 §4.6.3, VDAF-08 §7.2.5).
- `decrypt_collection_job`: the same for a DAP-19 `CollectionJobResp` (DAP-19 §4.6.6-§4.6.7):
  info "dap-19 aggregate share" || role || 0x00 and the AAD task_id || TaskConfiguration ||
  the collector's own CollectionJobReq bytes, so a leader that answers another batch or another
  task cannot be believed; the interval comes back in units and is returned in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from services.common.problems import InternalError
from shared import hpke
from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.hpke_context import aggregate_share_aad, aggregate_share_info
from shared.dap.ids import BatchId, TaskId
from shared.dap.messages import (
    BatchSelector,
    Collection,
    CollectionReq,
    FixedSizeQuery,
    HpkeCiphertext,
    Interval,
    Query,
    QueryType,
    Role,
)
from shared.dap.task import CollectorTask
from shared.vdaf.prio3 import Prio3

__all__ = [
    "CollectQuery",
    "CollectionError",
    "CollectionResult",
    "CurrentBatchQuery",
    "FixedSizeBatchQuery",
    "TimeIntervalQuery",
    "collection_job_req",
    "collection_request",
    "decrypt_collection",
    "decrypt_collection_job",
    "parse_query",
]

#: Prio3 has a single, empty aggregation parameter (VDAF-08 §7; digest §7.1).
PRIO3_AGG_PARAM = b""


class CollectionError(InternalError):
    """A collection cannot be completed; the message is safe to show to the user."""


class _QueryBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TimeIntervalQuery(_QueryBase):
    """A time_interval batch: [start, start + duration), both multiples of time_precision."""

    type: Literal["time_interval"]
    start: int = Field(ge=0, lt=2**64)
    duration: int = Field(ge=1, lt=2**64)


class FixedSizeBatchQuery(_QueryBase):
    """A fixed_size batch named by the batch id a previous collection returned."""

    type: Literal["fixed_size"]
    batch_id: str

    @field_validator("batch_id")
    @classmethod
    def _batch_id_is_valid(cls, value: str) -> str:
        try:
            BatchId.from_b64url(value)
        except DecodeError as exc:
            raise ValueError(str(exc)) from exc
        return value


class CurrentBatchQuery(_QueryBase):
    """A fixed_size batch the leader picks: one not yet tied to a collection (DAP-09 §4.1)."""

    type: Literal["current_batch"]


CollectQuery = Annotated[
    TimeIntervalQuery | FixedSizeBatchQuery | CurrentBatchQuery, Field(discriminator="type")
]
_QUERY_ADAPTER: TypeAdapter[CollectQuery] = TypeAdapter(CollectQuery)


def parse_query(data: Any) -> CollectQuery:
    """Validate a query from JSON-like data (pydantic ValidationError otherwise)."""
    if isinstance(data, str | bytes):
        return _QUERY_ADAPTER.validate_json(data)
    return _QUERY_ADAPTER.validate_python(data)


def query_json(query: CollectQuery) -> str:
    return query.model_dump_json()


def check_query(task: CollectorTask, query: CollectQuery) -> None:
    """Reject queries the leader would refuse anyway, with a clearer message (DAP-09 §4.6.5)."""
    if isinstance(query, TimeIntervalQuery):
        if task.query_type != QueryType.TIME_INTERVAL:
            raise CollectionError("this task uses fixed_size batches: query by batch id")
        precision = task.time_precision
        if query.start % precision or query.duration % precision:
            raise CollectionError(
                f"interval start and duration must be multiples of the task's "
                f"time_precision ({precision} s)"
            )
        if query.start + query.duration >= 2**64:
            raise CollectionError("interval end is beyond the uint64 time range")
    elif task.query_type != QueryType.FIXED_SIZE:
        raise CollectionError("this task uses time_interval batches: query by interval")
    elif task.dap == "dap-19" and isinstance(query, FixedSizeBatchQuery):
        raise CollectionError(
            "a DAP-19 leader-selected task collects the next batch only: query current_batch"
        )


def dap_query(query: CollectQuery) -> Query:
    """The DAP `Query` for an API query (DAP-09 §4.1)."""
    if isinstance(query, TimeIntervalQuery):
        return Query.time_interval(Interval(query.start, query.duration))
    if isinstance(query, FixedSizeBatchQuery):
        return Query.fixed_size(FixedSizeQuery.by_batch_id(BatchId.from_b64url(query.batch_id)))
    return Query.fixed_size(FixedSizeQuery.current_batch())


def collection_request(query: CollectQuery) -> CollectionReq:
    """The body of the collection-job PUT (DAP-09 §4.6.1)."""
    return CollectionReq(dap_query(query), PRIO3_AGG_PARAM)


def collection_job_req(task: CollectorTask, query: CollectQuery) -> m19.CollectionJobReq:
    """The body of a DAP-19 collection-job POST (DAP-19 §4.6.1): the queried interval in the
    task's time_precision units (`check_query` has made it whole units)."""
    if isinstance(query, TimeIntervalQuery):
        precision = task.time_precision
        interval = Interval(query.start // precision, query.duration // precision)
        return m19.CollectionJobReq(m19.Query.time_interval(interval), PRIO3_AGG_PARAM)
    if isinstance(query, FixedSizeBatchQuery):
        raise CollectionError("DAP-19 has no query by batch id")
    return m19.CollectionJobReq(m19.Query.leader_selected(), PRIO3_AGG_PARAM)


@dataclass(frozen=True, slots=True)
class CollectionResult:
    """A decrypted, unsharded collection."""

    report_count: int
    interval: Interval
    batch_id: BatchId | None
    aggregate: int | list[int]


def _open_share(
    keypair: hpke.HpkeKeyPair, role: Role, ciphertext: HpkeCiphertext, aad: bytes, info: bytes
) -> bytes:
    name = "leader" if role == Role.LEADER else "helper"
    if ciphertext.config_id != keypair.config_id:
        raise CollectionError(
            f"{name} aggregate share is sealed to HPKE config {ciphertext.config_id}, "
            f"not this task's config {keypair.config_id}"
        )
    try:
        return hpke.open(keypair, ciphertext.enc, info, aad, ciphertext.payload)
    except hpke.HpkeError:
        raise CollectionError(f"{name} aggregate share does not decrypt") from None


def _unshard(vdaf: Prio3, shares: list[bytes], report_count: int) -> int | list[int]:
    """The aggregate of both opened shares (VDAF-08 / VDAF-20 §7.2.5 `unshard`)."""
    try:
        aggregate = vdaf.unshard(shares, report_count)
    except (DecodeError, ValueError) as exc:
        raise CollectionError(f"aggregate shares do not decode for this VDAF: {exc}") from None
    return [int(x) for x in aggregate] if isinstance(aggregate, list) else int(aggregate)


def decrypt_collection(
    task_id: TaskId,
    vdaf: Prio3,
    keypair: hpke.HpkeKeyPair,
    query: Query,
    collection: Collection,
) -> CollectionResult:
    """Open and unshard a `Collection` answering `query` (DAP-09 §4.6.3-§4.6.4).

    The AAD's batch selector is the *queried* interval for time_interval, and the batch id the
    leader put in the Collection for fixed_size (digest §7.3); a leader answering another
    batch than the one asked for therefore fails decryption rather than being believed.
    """
    selector_type = collection.part_batch_selector.query_type
    if selector_type != query.query_type:
        raise CollectionError(
            f"leader answered a {selector_type.name.lower()} collection to a "
            f"{query.query_type.name.lower()} query"
        )
    batch_id = collection.part_batch_selector.batch_id
    if query.query_type == QueryType.TIME_INTERVAL:
        assert query.batch_interval is not None
        selector = BatchSelector.time_interval(query.batch_interval)
    else:
        assert batch_id is not None and query.fixed_size_query is not None
        wanted = query.fixed_size_query.batch_id
        if wanted is not None and wanted != batch_id:
            raise CollectionError("leader answered for a different batch id than the one queried")
        selector = BatchSelector.fixed_size(batch_id)

    aad = aggregate_share_aad(task_id, PRIO3_AGG_PARAM, selector)
    shares = [
        _open_share(keypair, role, ciphertext, aad, aggregate_share_info(role))
        for role, ciphertext in (
            (Role.LEADER, collection.leader_encrypted_agg_share),
            (Role.HELPER, collection.helper_encrypted_agg_share),
        )
    ]
    aggregate = _unshard(vdaf, shares, collection.report_count)
    return CollectionResult(collection.report_count, collection.interval, batch_id, aggregate)


def decrypt_collection_job(
    task: CollectorTask,
    keypair: hpke.HpkeKeyPair,
    request: m19.CollectionJobReq,
    response: m19.CollectionJobResp,
) -> CollectionResult:
    """Open and unshard a DAP-19 `CollectionJobResp` answering `request` (DAP-19 §4.6.6-
    §4.6.7); the result's interval in seconds, like DAP-09's."""
    if task.task_configuration is None:
        raise CollectionError(f"task {task.task_id} has no TaskConfiguration")
    # The strict codec re-encodes the provisioned configuration and the collector's own
    # request to the very bytes provisioned and posted (digest §7.4).
    aad = m19.AggregateShareAad(task.id, task.configuration, request).encode()
    shares = [
        _open_share(keypair, role, ciphertext, aad, m19.aggregate_share_info(role))
        for role, ciphertext in (
            (Role.LEADER, response.leader_encrypted_agg_share),
            (Role.HELPER, response.helper_encrypted_agg_share),
        )
    ]
    aggregate = _unshard(task.vdaf.instance(), shares, response.report_count)
    precision = task.time_precision
    interval = Interval(response.interval.start * precision, response.interval.duration * precision)
    return CollectionResult(response.report_count, interval, None, aggregate)
