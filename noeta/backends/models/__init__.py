"""Adapters for the model port (`noeta.core.model.Provider`), one module per LLM API."""
