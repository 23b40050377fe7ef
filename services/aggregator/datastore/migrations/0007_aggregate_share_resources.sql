-- DAP-19 aggregate-share resources (DAP-19 §4.6.4): the helper's id of each answered request

CREATE TABLE aggregate_share_resources (
    task_id {blob} NOT NULL,
    share_id {blob} NOT NULL,
    batch_selector {blob} NOT NULL,
    agg_param {blob} NOT NULL,
    PRIMARY KEY (task_id, share_id));
