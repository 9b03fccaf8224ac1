-- noeta_append_events (0005, 0008) has had no caller since 0009: the stores append
-- through noeta_append_and_continue and its siblings. Dropping it leaves one fenced
-- append less to read, grant and keep right (issue 27).
DROP FUNCTION noeta_append_events(text, bigint, bigint, text[], text[]);
