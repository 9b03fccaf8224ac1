CREATE TRIGGER late_results_announced AFTER INSERT ON late_results FOR EACH ROW EXECUTE FUNCTION noeta_announce_late_result();
