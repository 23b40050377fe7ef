-- collection jobs: whether the collector has read the job's final state (DAP-19 leader-selected identity)

ALTER TABLE collection_jobs ADD COLUMN delivered {bigint} NOT NULL DEFAULT 0;

UPDATE collection_jobs SET delivered = 1 WHERE state NOT IN ('pending', 'collecting');
