-- 0005: the live workers, so `durably runs why` can say how many serve a run's queue.
-- A worker writes its row when it starts and again on every beat (expires_at moves on),
-- and deletes it when it stops; a row past expires_at is a worker that died (not counted,
-- and pruned by the next beat of any worker).

CREATE TABLE workers (
    owner      TEXT PRIMARY KEY,
    queues     TEXT NOT NULL,
    started_at REAL NOT NULL,
    beat_at    REAL NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
