-- helper jobs: how many of their reports finished and failed, instead of a report_aggregations
-- row per report (one-round Prio3 finishes every report in the job's one request, the stored
-- response answers re-sends and client_reports holds the anti-replay set)

ALTER TABLE aggregation_jobs ADD COLUMN finished_reports {bigint} NOT NULL DEFAULT 0;

ALTER TABLE aggregation_jobs ADD COLUMN failed_reports {bigint} NOT NULL DEFAULT 0;

UPDATE aggregation_jobs SET
    finished_reports = (SELECT COUNT(*) FROM report_aggregations ra
        WHERE ra.task_id = aggregation_jobs.task_id AND ra.job_id = aggregation_jobs.job_id
        AND ra.state = 'finished'),
    failed_reports = (SELECT COUNT(*) FROM report_aggregations ra
        WHERE ra.task_id = aggregation_jobs.task_id AND ra.job_id = aggregation_jobs.job_id
        AND ra.state = 'failed')
    WHERE role = 'helper';

DELETE FROM report_aggregations WHERE EXISTS (SELECT 1 FROM aggregation_jobs aj
    WHERE aj.task_id = report_aggregations.task_id AND aj.job_id = report_aggregations.job_id
    AND aj.role = 'helper');
