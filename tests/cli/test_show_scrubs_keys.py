"""`noeta show` (a process that holds none of the worker's keys) hides the keys a tool
printed, by their format, in its text and its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Made-up keys; the command prints each from two halves, so only the tool's output (and
# no tool input the model wrote) holds them whole.
KEYS = [
    "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-dcBA",
    "sk-proj-Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHh",
    "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "AKIAIOSFODNN7EXAMPLE",
]
URL_PASSWORD = "pr1nted-Pa55word"


def printing(secret: str) -> str:
    half = len(secret) // 2
    return f"printf '%s%s\\n' '{secret[:half]}' '{secret[half:]}'"


def noeta(*arguments: str, store: str) -> subprocess.CompletedProcess[str]:
    environment = {
        k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
    }
    return subprocess.run(
        [sys.executable, "-m", "noeta", *arguments, "--store", store],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def test_show_hides_keys_that_a_tool_printed(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    url = f"printf 'https://bot:%s%s@git.example.com\\n' '{URL_PASSWORD[:5]}' '{URL_PASSWORD[5:]}'"
    command = "; ".join([*map(printing, KEYS), url])
    script = tmp_path / "leaky.yaml"
    call = {"id": "c1", "name": "Bash", "input": {"command": command}}
    script.write_text(json.dumps({"replies": [{"tool_calls": [call]}, {"text": "done"}]}))
    ran = noeta("run", "print", "--model", f"scripted:{script}", "--id", "leaky", store=store)
    assert ran.returncode == 0, ran.stderr

    shown = noeta("show", "leaky", store=store)
    as_json = noeta("show", "leaky", "--json", store=store)
    assert shown.returncode == 0 and as_json.returncode == 0, shown.stderr + as_json.stderr
    (finished,) = [e for e in json.loads(as_json.stdout)["log"] if e["type"] == "ToolFinished"]
    output = finished["data"]["content"]
    assert output.count("[redacted]") == len(KEYS) + 1  # the tool's output, scrubbed
    assert "https://bot:[redacted]@git.example.com" in output
    for secret in [*KEYS, URL_PASSWORD]:
        assert secret not in shown.stdout
        assert secret not in as_json.stdout
    assert "tool result (c1)" in shown.stdout and "[redacted]" in shown.stdout
