-- spent tokens and rejection counters

CREATE TABLE spent_tokens (
    token_key_id {blob} NOT NULL,
    context {blob} NOT NULL,
    nonce {blob} NOT NULL,
    task_id {blob} NOT NULL,
    report_id {blob} NOT NULL,
    spent_at {bigint} NOT NULL,
    PRIMARY KEY (token_key_id, context, nonce));

CREATE INDEX spent_tokens_task ON spent_tokens (task_id);

CREATE TABLE rejection_counts (
    task_id {blob} NOT NULL,
    stage {text} NOT NULL,
    reason {text} NOT NULL,
    shard {bigint} NOT NULL,
    count {bigint} NOT NULL,
    PRIMARY KEY (task_id, stage, reason, shard));
