"""Decryption and unsharding of Collections (DAP-09 §4.6.3-§4.6.4) on real aggregate shares."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from services.collector.collect import (
    CollectionError,
    FixedSizeBatchQuery,
    TimeIntervalQuery,
    check_query,
    collection_request,
    dap_query,
    decrypt_collection,
    parse_query,
)
from shared import hpke
from shared.dap.ids import BatchId, TaskId
from shared.dap.messages import (
    Collection,
    FixedSizeQuery,
    HpkeConfig,
    Interval,
    Query,
    QueryType,
)
from shared.dap.task import CollectorTask
from shared.vdaf.prio3 import Prio3
from shared.vdaf.spec import VdafSpec
from tests.collector.fakes import make_collection

INTERVAL = Interval(1_699_999_200, 3600)


def _keypair() -> tuple[hpke.HpkeKeyPair, HpkeConfig]:
    keypair = hpke.generate_keypair(7)
    config = HpkeConfig(
        keypair.config_id, keypair.kem_id, keypair.kdf_id, keypair.aead_id, keypair.public_key
    )
    return keypair, config


def _count_collection() -> tuple[TaskId, Prio3, hpke.HpkeKeyPair, Collection]:
    """A Prio3Count collection of one report over INTERVAL, sealed to a fresh key pair."""
    vdaf = VdafSpec(type="Prio3Count").instance()
    task_id = TaskId.random()
    keypair, config = _keypair()
    collection = make_collection(
        task_id, vdaf, config, [1], query_type=QueryType.TIME_INTERVAL, aad_interval=INTERVAL
    )
    return task_id, vdaf, keypair, collection


CASES: list[tuple[dict[str, Any], list[Any], Any]] = [
    ({"type": "Prio3Count"}, [1, 0, 1, 1, 0, 1], 4),
    ({"type": "Prio3Sum", "bits": 8}, [255, 3, 0, 17], 275),
    ({"type": "Prio3Histogram", "length": 4, "chunk_length": 2}, [0, 3, 3, 1, 3], [1, 1, 0, 3]),
    (
        {"type": "Prio3SumVec", "length": 3, "bits": 4, "chunk_length": 2},
        [[1, 2, 3], [15, 0, 1]],
        [16, 2, 4],
    ),
]


@pytest.mark.parametrize(("spec", "measurements", "expected"), CASES, ids=lambda c: str(c)[:30])
def test_time_interval_collection_unshards_to_the_sum(
    spec: dict[str, Any], measurements: list[Any], expected: Any
) -> None:
    vdaf = VdafSpec.model_validate(spec).instance()
    task_id = TaskId.random()
    keypair, config = _keypair()
    collection = make_collection(
        task_id,
        vdaf,
        config,
        measurements,
        query_type=QueryType.TIME_INTERVAL,
        aad_interval=INTERVAL,
    )
    result = decrypt_collection(task_id, vdaf, keypair, Query.time_interval(INTERVAL), collection)
    assert result.aggregate == expected
    assert result.report_count == len(measurements)
    assert result.batch_id is None


def test_fixed_size_collection_uses_the_leaders_batch_id() -> None:
    vdaf = VdafSpec(type="Prio3Count").instance()
    task_id, batch_id = TaskId.random(), BatchId.random()
    keypair, config = _keypair()
    collection = make_collection(
        task_id, vdaf, config, [1, 1, 0], query_type=QueryType.FIXED_SIZE, batch_id=batch_id
    )
    current = Query.fixed_size(FixedSizeQuery.current_batch())
    result = decrypt_collection(task_id, vdaf, keypair, current, collection)
    assert (result.aggregate, result.batch_id) == (2, batch_id)
    by_id = Query.fixed_size(FixedSizeQuery.by_batch_id(batch_id))
    assert decrypt_collection(task_id, vdaf, keypair, by_id, collection).aggregate == 2
    other = Query.fixed_size(FixedSizeQuery.by_batch_id(BatchId.random()))
    with pytest.raises(CollectionError, match="different batch id"):
        decrypt_collection(task_id, vdaf, keypair, other, collection)


def test_aad_binds_the_queried_interval_and_task() -> None:
    task_id, vdaf, keypair, collection = _count_collection()
    shifted = Query.time_interval(Interval(INTERVAL.start + 3600, 3600))
    with pytest.raises(CollectionError, match="leader aggregate share does not decrypt"):
        decrypt_collection(task_id, vdaf, keypair, shifted, collection)
    with pytest.raises(CollectionError, match="does not decrypt"):
        decrypt_collection(
            TaskId.random(), vdaf, keypair, Query.time_interval(INTERVAL), collection
        )


def test_swapped_shares_fail_because_info_names_the_role() -> None:
    task_id, vdaf, keypair, collection = _count_collection()
    swapped = replace(
        collection,
        leader_encrypted_agg_share=collection.helper_encrypted_agg_share,
        helper_encrypted_agg_share=collection.leader_encrypted_agg_share,
    )
    with pytest.raises(CollectionError, match="does not decrypt"):
        decrypt_collection(task_id, vdaf, keypair, Query.time_interval(INTERVAL), swapped)


def test_wrong_config_id_and_wrong_key_are_reported() -> None:
    task_id, vdaf, _, collection = _count_collection()
    other = hpke.generate_keypair(8)
    with pytest.raises(CollectionError, match="HPKE config 7"):
        decrypt_collection(task_id, vdaf, other, Query.time_interval(INTERVAL), collection)
    stranger = hpke.generate_keypair(7)
    with pytest.raises(CollectionError, match="does not decrypt"):
        decrypt_collection(task_id, vdaf, stranger, Query.time_interval(INTERVAL), collection)


def test_query_type_mismatch_and_wrong_vdaf() -> None:
    count = VdafSpec(type="Prio3Count").instance()
    task_id = TaskId.random()
    keypair, config = _keypair()
    collection = make_collection(
        task_id, count, config, [1], query_type=QueryType.FIXED_SIZE, batch_id=BatchId.random()
    )
    with pytest.raises(CollectionError, match="fixed_size collection to a time_interval"):
        decrypt_collection(task_id, count, keypair, Query.time_interval(INTERVAL), collection)
    histogram = VdafSpec(type="Prio3Histogram", length=4, chunk_length=2).instance()
    current = Query.fixed_size(FixedSizeQuery.current_batch())
    with pytest.raises(CollectionError, match="do not decode"):
        decrypt_collection(task_id, histogram, keypair, current, collection)


def _task(query_type: str, precision: int = 3600) -> CollectorTask:
    return CollectorTask(
        task_id=TaskId.random().to_b64url(),
        leader_endpoint="http://leader",
        query_type=query_type,  # type: ignore[arg-type]
        vdaf=VdafSpec(type="Prio3Count"),
        collector_auth_token="t" * 32,
        time_precision=precision,
    )


def test_queries_are_checked_against_the_task() -> None:
    interval = parse_query({"type": "time_interval", "start": 7200, "duration": 3600})
    assert isinstance(interval, TimeIntervalQuery)
    check_query(_task("time_interval"), interval)
    with pytest.raises(CollectionError, match="multiples"):
        check_query(
            _task("time_interval"),
            parse_query({"type": "time_interval", "start": 7201, "duration": 3600}),
        )
    with pytest.raises(CollectionError, match="fixed_size"):
        check_query(_task("fixed_size"), interval)
    current = parse_query({"type": "current_batch"})
    with pytest.raises(CollectionError, match="time_interval"):
        check_query(_task("time_interval"), current)
    check_query(_task("fixed_size"), current)


def test_query_parsing_rejects_bad_input_and_encodes_collect_reqs() -> None:
    for bad in (
        {"type": "time_interval", "start": -1, "duration": 1},
        {"type": "time_interval", "start": 0, "duration": 0},
        {"type": "fixed_size", "batch_id": "short"},
        {"type": "weekly"},
        {"type": "current_batch", "extra": 1},
    ):
        with pytest.raises(ValidationError):
            parse_query(bad)
    batch_id = BatchId.random()
    query = parse_query({"type": "fixed_size", "batch_id": batch_id.to_b64url()})
    assert isinstance(query, FixedSizeBatchQuery)
    assert dap_query(query) == Query.fixed_size(FixedSizeQuery.by_batch_id(batch_id))
    req = collection_request(parse_query({"type": "time_interval", "start": 0, "duration": 60}))
    # Query(time_interval, [0, 60)) || agg_param<0..2^32-1> = empty (DAP-09 §4.6.1).
    assert req.encode().hex() == "01" + "00" * 8 + "000000000000003c" + "00000000"
