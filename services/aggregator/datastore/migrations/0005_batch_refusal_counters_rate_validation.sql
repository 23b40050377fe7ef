-- batch refusal counters (rate validation)

CREATE TABLE batch_refusals (
    task_id {blob} NOT NULL,
    reason {text} NOT NULL,
    count {bigint} NOT NULL,
    PRIMARY KEY (task_id, reason));

CREATE TABLE batch_bucket_counts (
    task_id {blob} NOT NULL,
    batch_key {blob} NOT NULL,
    bucket {bigint} NOT NULL,
    shard {bigint} NOT NULL,
    report_count {bigint} NOT NULL,
    PRIMARY KEY (task_id, batch_key, bucket, shard));

CREATE INDEX batch_bucket_counts_bucket ON batch_bucket_counts (task_id, bucket);
