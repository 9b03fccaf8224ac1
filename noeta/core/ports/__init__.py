"""The kernel's ports: the protocols noeta runs against (the store, models, tools, plugins,
their hooks) and the values that cross them. Nothing here runs anything."""
