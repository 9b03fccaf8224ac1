"""The MCP servers' processes and pipes, on both of the worker's loops."""

from tests.event_loops import on_both_loops

# The plugin runs on the worker's loop: uvloop by default, asyncio's when turned off.
pytest_asyncio_loop_factories = on_both_loops
