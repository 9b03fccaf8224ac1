-- Workers are first-class (issue 31 item 1, ADR-0100): the sqlite twin of PostgreSQL's
-- migration of the same number, which says why each column exists.
ALTER TABLE workers ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN version TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN instance TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN processed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN stopped_at INTEGER;
