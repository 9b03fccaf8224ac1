"""Choosing a provider by model spec: `anthropic:<model>`, `openai:<model>`, `scripted:<file>`."""

from __future__ import annotations

import os
from pathlib import Path

from noeta.core.errors import ConfigError
from noeta.core.model import Provider

KNOWN = ("anthropic", "openai", "scripted")


def split_spec(spec: str) -> tuple[str, str]:
    prefix, colon, name = spec.partition(":")
    if not colon or not name or prefix not in KNOWN:
        raise ConfigError(
            f"unknown model spec {spec!r}: use anthropic:MODEL, openai:MODEL or scripted:FILE"
        )
    return prefix, name


def stored_spec(spec: str, base: str | Path = ".") -> str:
    """The spec as a task keeps it: a relative `scripted:` path made absolute (from `base`,
    the submitter's folder by default), since the worker that reads it runs elsewhere."""
    prefix, name = split_spec(spec)
    if prefix != "scripted":
        return spec
    return f"scripted:{os.path.abspath(Path(base) / Path(name).expanduser())}"


def checked_spec(spec: str) -> str:
    """`stored_spec`, with a `scripted:` script read and checked as `noeta run` and the
    worker read it, so that a submitter hears of a missing or broken script at once."""
    stored = stored_spec(spec)
    prefix, name = split_spec(stored)
    if prefix == "scripted":
        from noeta.backends.models.scripted import load_script

        load_script(name)
    return stored


class ProviderRegistry:
    """Makes each provider once per spec and keeps it (and its HTTP connections)."""

    def __init__(self) -> None:
        self._providers: dict[str, Provider] = {}

    def provider_for(self, spec: str) -> tuple[Provider, str]:
        prefix, name = split_spec(spec)
        if spec not in self._providers:
            self._providers[spec] = _make(prefix, name)
        return self._providers[spec], name

    async def close(self) -> None:
        for provider in self._providers.values():
            await provider.close()
        self._providers.clear()


def _make(prefix: str, name: str) -> Provider:
    if prefix == "scripted":
        from noeta.backends.models.scripted import ScriptedProvider

        return ScriptedProvider.from_file(name)
    if prefix == "anthropic":
        from noeta.backends.models.anthropic import AnthropicProvider

        return AnthropicProvider.from_environment()
    from noeta.backends.models.openai import OpenAIProvider

    return OpenAIProvider.from_environment()
