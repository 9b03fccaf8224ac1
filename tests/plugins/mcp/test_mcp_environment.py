"""An MCP server starts with an allowlisted environment plus the names its entry passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from noeta.plugins.mcp import plugin

SERVER = str(Path(__file__).with_name("server.py"))


async def test_a_server_sees_the_names_it_is_given_and_none_of_the_workers_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-worker-secret")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:dburl-secret@db/x")
    monkeypatch.setenv("NOETA_STORE", "postgresql://u:store-secret@db/x")
    monkeypatch.setenv("SERVICE_TOKEN", "token-for-this-server")
    monkeypatch.setenv("LC_ALL", "C")
    pid_file = tmp_path / "server.pid"
    spec = {
        "command": sys.executable,
        "args": [SERVER],
        "env": {"NOETA_TEST_PID_FILE": str(pid_file)},
        "pass_env": ["SERVICE_TOKEN"],
    }
    mcp = plugin({"servers": {"test": spec}})  # type: ignore[dict-item]
    await mcp.start()
    try:
        pid = int(pid_file.read_text())
        raw = Path(f"/proc/{pid}/environ").read_bytes()  # noqa: ASYNC240
    finally:
        await mcp.close()
    environment = dict(item.split("=", 1) for item in raw.decode().split("\0") if item)
    assert environment["SERVICE_TOKEN"] == "token-for-this-server"
    assert environment["LC_ALL"] == "C"
    for secret in ("sk-ant-worker-secret", "dburl-secret", "store-secret"):
        assert secret not in raw.decode()


def test_pass_env_must_be_a_list_of_names() -> None:
    with pytest.raises(ValueError, match="'pass_env' must be a list of environment variable"):
        plugin({"servers": {"x": {"command": "run", "pass_env": ["A B"]}}})
