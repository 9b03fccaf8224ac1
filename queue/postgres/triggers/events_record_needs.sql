CREATE TRIGGER events_record_needs AFTER INSERT ON events FOR EACH ROW WHEN (new.type = 'PluginsPinned'::text AND new.epoch > 0) EXECUTE FUNCTION noeta_record_needs();
