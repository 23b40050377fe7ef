-- leader noised aggregate shares

CREATE TABLE leader_noised_shares (
    task_id {blob} NOT NULL,
    key_lo {blob} NOT NULL,
    key_hi {blob} NOT NULL,
    agg_param {blob} NOT NULL,
    report_count {bigint} NOT NULL,
    checksum {blob} NOT NULL,
    share {blob} NOT NULL,
    created_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, key_lo, key_hi, agg_param));
