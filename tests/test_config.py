"""The deployment config's `subagent_models` (ADR-0076): the documented examples load and
mean what the docs say; a wrong entry is one line naming its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from noeta.config import load_config
from noeta.core.errors import ConfigError
from noeta.core.rules.model_choice import is_allowed

ROOT = Path(__file__).resolve().parent.parent


def documented_model_lists() -> list[tuple[str, str]]:
    """Each config example in the docs and config.py's docstring that sets subagent_models."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "SECURITY.md"]:
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S):
            if "subagent_models" in block:
                found.append((path.name, block))
    docstring = (ROOT / "noeta" / "config.py").read_text().split('"""')[1]
    found.append(("noeta/config.py", docstring.split("\n", 1)[1]))
    return found


@pytest.mark.parametrize(("where", "text"), documented_model_lists(), ids=lambda v: str(v)[:20])
def test_the_documented_subagent_models_load_and_allow_what_they_say(
    tmp_path: Path, where: str, text: str
) -> None:
    config = tmp_path / "noeta.yaml"
    listed = yaml.safe_load(text)["subagent_models"]
    config.write_text(yaml.safe_dump({"subagent_models": listed}))
    allowed = load_config(str(config)).subagent_models
    assert allowed == tuple(listed)
    assert is_allowed("anthropic:claude-haiku-4-5", "anthropic:own", allowed)
    assert is_allowed("openai:gpt-anything", "anthropic:own", allowed)
    assert not is_allowed("anthropic:claude-opus-4", "anthropic:own", allowed)
    assert not is_allowed("scripted:/etc/shadow", "anthropic:own", allowed)


def test_by_default_only_the_tasks_own_model_is_allowed(tmp_path: Path) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text("plugins: [core]\n")
    allowed = load_config(str(config)).subagent_models
    assert allowed == ()
    assert is_allowed("scripted:/srv/own.yaml", "scripted:/srv/own.yaml", allowed)
    assert not is_allowed("scripted:/srv/other.yaml", "scripted:/srv/own.yaml", allowed)


def test_a_scripts_folder_allows_its_files_and_nothing_reached_through_dot_dot() -> None:
    allowed = ("scripted:/srv/scripts/*",)
    assert is_allowed("scripted:/srv/scripts/a.yaml", "x:y", allowed)
    assert not is_allowed("scripted:/srv/scripts/../noeta/password", "x:y", allowed)
    assert not is_allowed("scripted:/srv/scripts-other/a.yaml", "x:y", allowed)
    assert not is_allowed("anthropic:scripts", "x:y", allowed)


@pytest.mark.parametrize("entry", ["*", "claude", "nope:thing", "scripted:", 3])
def test_an_entry_that_is_not_a_model_spec_is_refused_with_its_line(
    tmp_path: Path, entry: object
) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(yaml.safe_dump({"subagent_models": ["openai:*", entry]}))
    with pytest.raises(ConfigError) as refused:
        load_config(str(config))
    message = str(refused.value)
    assert message.startswith(f"{config}, line 3: subagent_models: {entry!r} is not a model spec")
    assert "\n" not in message


def test_store_session_is_read_and_anything_but_a_url_refused_with_its_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "noeta.yaml"
    path.write_text("store_session: postgresql://noeta@db:5432/noeta\n")
    assert load_config(str(path)).store_session == "postgresql://noeta@db:5432/noeta"
    path.write_text("plugins: [core]\nstore_session: [a, b]\n")
    with pytest.raises(ConfigError, match="line 2: store_session must be a postgresql:// URL"):
        load_config(str(path))
