"""Plugins that ship with noeta: each contributes tools (and later gates) to a task."""
