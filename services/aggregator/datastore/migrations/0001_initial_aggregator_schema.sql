-- initial aggregator schema

CREATE TABLE tasks (
    task_id {blob} PRIMARY KEY,
    role {text} NOT NULL,
    definition {text} NOT NULL,
    aggregator_token_hash {blob} NOT NULL,
    collector_token_hash {blob},
    helper_token {text},
    created_at {bigint} NOT NULL);

CREATE TABLE hpke_keys (
    config_id {bigint} PRIMARY KEY,
    kem_id {bigint} NOT NULL, kdf_id {bigint} NOT NULL, aead_id {bigint} NOT NULL,
    public_key {blob} NOT NULL,
    private_key {blob} NOT NULL,
    state {text} NOT NULL,
    generation {bigint} NOT NULL,
    created_at {bigint} NOT NULL);

CREATE TABLE client_reports (
    task_id {blob} NOT NULL,
    report_id {blob} NOT NULL,
    client_time {bigint} NOT NULL,
    public_share {blob},
    leader_input_share {blob},
    helper_encrypted_share {blob},
    aggregation_started {bigint} NOT NULL,
    received_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, report_id));

CREATE INDEX client_reports_unaggregated
    ON client_reports (task_id, aggregation_started, client_time);

CREATE TABLE aggregation_jobs (
    task_id {blob} NOT NULL,
    job_id {blob} NOT NULL,
    role {text} NOT NULL,
    agg_param {blob} NOT NULL,
    batch_id {blob},
    time_min {bigint} NOT NULL,
    time_max {bigint} NOT NULL,
    state {text} NOT NULL,
    step {bigint} NOT NULL,
    lease_expiry {bigint} NOT NULL,
    lease_token {blob},
    lease_attempts {bigint} NOT NULL,
    request_hash {blob},
    response {blob},
    created_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, job_id));

CREATE INDEX aggregation_jobs_lease
    ON aggregation_jobs (role, state, lease_expiry);

CREATE TABLE report_aggregations (
    task_id {blob} NOT NULL,
    job_id {blob} NOT NULL,
    ord {bigint} NOT NULL,
    report_id {blob} NOT NULL,
    client_time {bigint} NOT NULL,
    state {text} NOT NULL,
    error {bigint},
    PRIMARY KEY (task_id, job_id, ord));

CREATE TABLE batch_aggregations (
    task_id {blob} NOT NULL,
    batch_key {blob} NOT NULL,
    agg_param {blob} NOT NULL,
    shard {bigint} NOT NULL,
    aggregate_share {blob} NOT NULL,
    report_count {bigint} NOT NULL,
    checksum {blob} NOT NULL,
    time_min {bigint} NOT NULL,
    time_max {bigint} NOT NULL,
    PRIMARY KEY (task_id, batch_key, agg_param, shard));

CREATE TABLE batches (
    task_id {blob} NOT NULL,
    batch_key {blob} NOT NULL,
    collected {bigint} NOT NULL,
    assigned {bigint} NOT NULL,
    filled {bigint} NOT NULL,
    created_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, batch_key));

CREATE TABLE collection_jobs (
    task_id {blob} NOT NULL,
    job_id {blob} NOT NULL,
    request_hash {blob} NOT NULL,
    query_type {bigint} NOT NULL,
    current_batch {bigint} NOT NULL,
    agg_param {blob} NOT NULL,
    batch_key {blob},
    interval_start {bigint},
    interval_duration {bigint},
    state {text} NOT NULL,
    report_count {bigint},
    checksum {blob},
    leader_share {blob},
    time_min {bigint},
    time_max {bigint},
    result {blob},
    error {text},
    lease_expiry {bigint} NOT NULL,
    lease_token {blob},
    lease_attempts {bigint} NOT NULL,
    created_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, job_id));

CREATE INDEX collection_jobs_lease ON collection_jobs (state, lease_expiry);

CREATE TABLE aggregate_share_jobs (
    task_id {blob} NOT NULL,
    batch_selector {blob} NOT NULL,
    agg_param {blob} NOT NULL,
    key_lo {blob} NOT NULL,
    key_hi {blob} NOT NULL,
    report_count {bigint} NOT NULL,
    checksum {blob} NOT NULL,
    response {blob} NOT NULL,
    created_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, batch_selector, agg_param));
