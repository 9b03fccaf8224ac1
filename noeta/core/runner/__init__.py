"""The runner: what a worker does with a claimed task, step by durable step."""
