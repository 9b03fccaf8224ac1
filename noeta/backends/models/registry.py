"""Choosing a provider by model spec: `anthropic:<model>`, `openai:<model>`, `scripted:<file>`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from noeta.core.errors import ConfigError
from noeta.core.ports.model import Provider

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

    async def provider_for(self, spec: str) -> tuple[Provider, str]:
        prefix, name = split_spec(spec)
        if spec not in self._providers:
            if prefix == "scripted":  # a file a task may have named: off the event loop
                made = await asyncio.to_thread(_open_script, name)
                self._providers.setdefault(spec, made)
            else:
                self._providers[spec] = _make(prefix)
        return self._providers[spec], name

    async def close(self) -> None:
        for provider in self._providers.values():
            await provider.close()
        self._providers.clear()


def _open_script(path: str) -> Provider:
    """The script at `path` for a task: a regular file, no link, of bounded size. Every
    failure reads the same, so a task that names a file learns neither whether it exists
    nor a word of what it holds (`noeta run --model scripted:FILE` says what is wrong)."""
    from noeta.backends.models.scripted import MAX_SCRIPT_BYTES, ScriptedProvider

    try:
        return ScriptedProvider.from_file(path, follow_links=False)
    except Exception:  # whatever it was, its words may quote the file
        raise ConfigError(
            f"{path} is not a usable model script (a regular file of valid script YAML, "
            f"at most {MAX_SCRIPT_BYTES} bytes)"
        ) from None


def _make(prefix: str) -> Provider:
    if prefix == "anthropic":
        from noeta.backends.models.anthropic import AnthropicProvider

        return AnthropicProvider.from_environment()
    from noeta.backends.models.openai import OpenAIProvider

    return OpenAIProvider.from_environment()


def check_script(spec: str) -> None:
    """For the spec a person gives on the command line: what is wrong with its script, in
    full (ConfigError naming the line), read as a worker would read it."""
    prefix, name = split_spec(spec)
    if prefix == "scripted":
        from noeta.backends.models.scripted import load_script

        load_script(name, follow_links=False)
