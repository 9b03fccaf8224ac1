-- A placeholder for the lead's 0033 (taken on another branch), so that this branch's 0034
-- applies: migrations are numbered 1..n. Delete it when the lead's 0033 merges.
SELECT 1;
