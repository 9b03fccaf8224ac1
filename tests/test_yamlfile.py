"""The one YAML loader every file people write goes through: what it refuses, and that each
refusal names the file, the line and (where YAML knows it) the column."""

from __future__ import annotations

from pathlib import Path

import pytest

from noeta import yamlfile
from noeta.backends.models.scripted import load_script
from noeta.config import load_config
from noeta.core.errors import ConfigError

BOMB = "a0: &a0 [lol]\n" + "".join(
    f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]\n" for n in range(1, 10)
)


def refusal(path: Path, text: str | bytes) -> str:
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    with pytest.raises(ConfigError) as raised:
        yamlfile.load(path, what="noeta config")
    message = str(raised.value)
    assert message.startswith(f"{path}, ") or message.startswith(f"{path}: "), message
    return message.removeprefix(f"{path}, ")


def test_an_alias_bomb_is_refused_in_every_kind_of_file(tmp_path: Path) -> None:
    assert len(BOMB) < 600
    config, script = tmp_path / "noeta.yaml", tmp_path / "script.yaml"
    config.write_text(BOMB)
    script.write_text(BOMB)
    for load in (lambda: load_config(str(config)), lambda: load_script(str(script))):
        with pytest.raises(ConfigError, match=r"line 1, column 5: anchors and aliases"):
            load()


def test_a_merge_key_is_an_alias_too(tmp_path: Path) -> None:
    text = "base: {a: 1}\nother:\n  <<: *base\n"
    assert refusal(tmp_path / "f.yaml", text).startswith("line 3, column 7: anchors and aliases")


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    text = "plugins: [core]\ngates:\n  - action: deny\n    tool: Bash\n    tool: Write\n"
    assert refusal(tmp_path / "f.yaml", text) == (
        "line 5, column 5: the key 'tool' is given twice (first on line 4); keep one"
    )


def test_a_file_over_the_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with open(path, "wb") as file:
        file.truncate(50 * 1024 * 1024)
    with pytest.raises(ConfigError, match=r"big.yaml: the noeta config is over 1048576 bytes"):
        yamlfile.load(path, what="noeta config")


def test_a_file_that_is_not_utf8_names_the_line_of_the_bad_byte(tmp_path: Path) -> None:
    text = "plugins:\n  - core\ngates: caf\xe9\n".encode("latin-1")
    assert refusal(tmp_path / "f.yaml", text) == (
        "line 3, column 11: the noeta config is not UTF-8 text (byte 0xe9 at offset 28)"
    )


def test_a_binary_file_names_the_line_of_the_control_character(tmp_path: Path) -> None:
    message = refusal(tmp_path / "f.yaml", b"a: 1\nb: \x00\x01\x02\n")
    assert message.startswith("line 2: the noeta config holds the character #x0000")


def test_nesting_too_deep_is_one_error_not_a_crash(tmp_path: Path) -> None:
    message = refusal(tmp_path / "f.yaml", "[" * 100_000)
    assert "nests lists or mappings too deeply" in message


def test_an_item_that_is_not_a_mapping_has_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "noeta.yaml"
    path.write_text("gates:\n  - action: deny\n    tool: Bash\n  - 42\n")
    with pytest.raises(ConfigError, match=r", line 4: gate: each gate is a mapping"):
        load_config(str(path))
    path.write_text("plugins: core\n")
    with pytest.raises(ConfigError, match=r", line 1: plugins must be a list"):
        load_config(str(path))
    path.write_text("workspaces: [a]\n")
    with pytest.raises(ConfigError, match=r", line 1: workspaces must be a folder's path"):
        load_config(str(path))


def test_plain_values_come_back_as_plain_dicts_and_lists(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("a:\n  - {b: 1}\n  - 2\n")
    document = yamlfile.load(path, what="file")
    assert yamlfile.line_of(document["a"], 1) == 3
    plain = yamlfile.plain(document)
    assert plain == {"a": [{"b": 1}, 2]}
    assert type(plain) is dict and type(plain["a"]) is list and type(plain["a"][0]) is dict
