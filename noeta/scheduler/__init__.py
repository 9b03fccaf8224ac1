"""The scheduler: cron files (cronfile), their slots in UTC (slots), and the process
that fires each (schedule, slot) once."""
