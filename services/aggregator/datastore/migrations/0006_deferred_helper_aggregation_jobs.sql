-- deferred helper aggregation jobs (DAP-19 §3.1): requests answered "pending", prepared when polled

CREATE TABLE deferred_aggregation_jobs (
    task_id {blob} NOT NULL,
    job_id {blob} NOT NULL,
    request {blob} NOT NULL,
    created_at {bigint} NOT NULL,
    PRIMARY KEY (task_id, job_id));
