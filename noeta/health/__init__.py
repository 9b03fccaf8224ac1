"""Health and readiness for operators (`--health ADDR`): the loops' last turns (/livez),
whether the process should get work (/readyz), and Prometheus metrics (/metrics)."""
