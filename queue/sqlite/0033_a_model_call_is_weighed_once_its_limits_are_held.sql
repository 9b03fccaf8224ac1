-- Nothing to change in sqlite: a single writer weighs a call under its write lock (see
-- PostgreSQL's 0033).
SELECT 1;
