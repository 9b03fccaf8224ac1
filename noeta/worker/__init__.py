"""Processes that run tasks: the claim loop, lease renewal, lost claims."""
