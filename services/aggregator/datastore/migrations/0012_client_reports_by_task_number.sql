-- client_reports keyed by a task's number instead of its 32-byte id
-- The anti-replay key (task, report id) is a B-tree insert at a random place for every report
-- on both aggregators: with the id in every entry a leaf holds ~130 of them, with a
-- number ~280, so a commit dirties (writes to the WAL, then checkpoints) fewer pages. Numbers
-- are never reused (`task_numbers` keeps the last one issued), so no row of a deleted task
-- can be taken for one of a later task's.

ALTER TABLE tasks ADD COLUMN number {bigint};

UPDATE tasks SET number = ranked.n
    FROM (SELECT task_id, ROW_NUMBER() OVER (ORDER BY task_id) AS n FROM tasks) ranked
    WHERE ranked.task_id = tasks.task_id;

CREATE UNIQUE INDEX tasks_number ON tasks (number);

CREATE TABLE task_numbers (last {bigint} NOT NULL);

INSERT INTO task_numbers (last) SELECT COUNT(*) FROM tasks;

CREATE TABLE client_reports_by_number (
    task_number {bigint} NOT NULL,
    report_id {blob} NOT NULL,
    client_time {bigint} NOT NULL,
    public_share {blob},
    leader_input_share {blob},
    helper_encrypted_share {blob},
    aggregation_started {bigint} NOT NULL,
    received_at {bigint} NOT NULL,
    PRIMARY KEY (task_number, report_id));

INSERT INTO client_reports_by_number (task_number, report_id, client_time, public_share,
    leader_input_share, helper_encrypted_share, aggregation_started, received_at)
    SELECT t.number, c.report_id, c.client_time, c.public_share, c.leader_input_share,
        c.helper_encrypted_share, c.aggregation_started, c.received_at
    FROM client_reports c JOIN tasks t ON t.task_id = c.task_id;

DROP TABLE client_reports;

ALTER TABLE client_reports_by_number RENAME TO client_reports;

CREATE INDEX client_reports_unaggregated
    ON client_reports (task_number, aggregation_started, client_time);
