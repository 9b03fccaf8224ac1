"""Adapters for the model port (`noeta.core.ports.model.Provider`), one module per LLM API."""
