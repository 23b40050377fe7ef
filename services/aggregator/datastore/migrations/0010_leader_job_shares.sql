-- leader jobs made at upload: their reports' shares in one row per job, deleted when the job finishes

CREATE TABLE leader_job_shares (
    task_id {blob} NOT NULL,
    job_id {blob} NOT NULL,
    shares {blob} NOT NULL,
    PRIMARY KEY (task_id, job_id));
