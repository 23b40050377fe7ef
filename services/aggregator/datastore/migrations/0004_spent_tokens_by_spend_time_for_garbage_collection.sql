-- spent tokens by spend time, for garbage collection

DROP INDEX spent_tokens_task;

CREATE INDEX spent_tokens_spent ON spent_tokens (task_id, spent_at);
