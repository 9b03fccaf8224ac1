"""A command the model runs cannot read the worker's secrets from /proc, as a non-root user.

Root reads every process's /proc files whatever the dumpable flag says, so the test runs
noeta as an unprivileged user (`setpriv` to nobody when the suite itself runs as root).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-worker-secret-1",
    "DATABASE_URL": "postgresql://app:dburl-secret-2@db.internal/app",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer otlp-secret-3",
    "PGPASSWORD": "pg-secret-4",
}


def unprivileged_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    if not sys.platform.startswith("linux") or shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot become an unprivileged user")
    nobody = pwd.getpwnam("nobody")
    return ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the unprivileged user can write (pytest's tmp_path is root's own)."""
    path = Path(tempfile.mkdtemp(prefix="noeta-nondumpable-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_bash_cannot_read_the_workers_environment_from_proc(shared_dir: Path) -> None:
    prefix = unprivileged_prefix()
    script = shared_dir / "leak.yaml"
    command = "cat /proc/$PPID/environ | tr '\\\\0' '\\\\n'; echo ---; env"
    script.write_text(
        "replies:\n"
        f"  - tool_calls: [{{id: c1, name: Bash, input: {{command: {json.dumps(command)}}}}}]\n"
        "  - text: done\n"
    )
    config = shared_dir / "noeta.yaml"
    config.write_text(f"workspaces: {shared_dir / 'workspaces'}\n")
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(shared_dir),
        "NOETA_HOME": str(shared_dir / "home"),
        "NOETA_STORE": f"sqlite:///{shared_dir / 'noeta.db'}",
        **SECRETS,
    }
    run = subprocess.run(
        [*prefix, sys.executable, "-m", "noeta", "run", "hi", "--id", "leak",
         "--model", f"scripted:{script}", "--config", str(config)],
        capture_output=True, text=True, env=environment, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "noeta", "show", "leak", "--json"],
        capture_output=True, text=True, env=environment, timeout=120, check=True,
    )  # fmt: skip
    results = [
        event["data"]["content"]
        for event in json.loads(shown.stdout)["log"]
        if event["type"] == "ToolFinished"
    ]
    [output] = results
    assert "/environ: Permission denied" in output  # it tried, and the kernel refused
    assert "HOME=" in output  # the command ran and printed its own environment
    for secret in SECRETS.values():
        assert secret not in output
