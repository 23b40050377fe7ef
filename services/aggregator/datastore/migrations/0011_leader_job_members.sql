-- leader jobs: their reports (ids and times, in job order) in the job row
-- and how many finished and failed, as helper jobs (0009), instead of a report_aggregations
-- row per report (jobs still in progress keep their rows until they finish)

ALTER TABLE aggregation_jobs ADD COLUMN members {blob};

UPDATE aggregation_jobs SET
    finished_reports = (SELECT COUNT(*) FROM report_aggregations ra
        WHERE ra.task_id = aggregation_jobs.task_id AND ra.job_id = aggregation_jobs.job_id
        AND ra.state = 'finished'),
    failed_reports = (SELECT COUNT(*) FROM report_aggregations ra
        WHERE ra.task_id = aggregation_jobs.task_id AND ra.job_id = aggregation_jobs.job_id
        AND ra.state = 'failed')
    WHERE role = 'leader' AND state != 'in_progress';

DELETE FROM report_aggregations WHERE EXISTS (SELECT 1 FROM aggregation_jobs aj
    WHERE aj.task_id = report_aggregations.task_id AND aj.job_id = report_aggregations.job_id
    AND aj.role = 'leader' AND aj.state != 'in_progress');
