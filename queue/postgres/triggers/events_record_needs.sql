CREATE TRIGGER events_record_needs AFTER INSERT ON events FOR EACH ROW WHEN (new.type = 'PluginsPinned'::text) EXECUTE FUNCTION noeta_record_needs();
