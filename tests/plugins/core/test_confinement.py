"""Bash confined: real commands on the real kernel reach their own workspace, the system
and the operator's paths, and nothing else: not another task's files, not the noeta home
with the server's password, not the worker by signal or abstract socket. Each test runs
under both layers: the namespaces (with Landlock inside) and Landlock alone, which is what
a machine without user namespaces gets."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from noeta.core.errors import ConfigError
from noeta.core.ports.tool import ToolContext, ToolError, ToolOutput
from noeta.plugins.core import Bash, plugin
from noeta.plugins.core.bash import run_job
from noeta.plugins.core.confinement import Confinement, check_tools_at_start
from noeta.plugins.core.landlock import Availability, handled_rights, kernel_availability
from noeta.plugins.core.sandbox import Bubblewrap, bubblewrap

KERNEL = kernel_availability()
WRAP = bubblewrap()
landlock_only = pytest.mark.skipif(
    not KERNEL.abi, reason=f"needs Landlock, which this machine lacks: {KERNEL.reason}"
)
GONE = Availability(0, "simulated: this kernel has no Landlock")
NO_NAMESPACES = Availability(0, "simulated: no user namespaces")
# What a command is told where its view has no such path, or Landlock refuses it.
REFUSED = ("Permission denied", "No such file or directory", "Read-only file system")


@pytest.fixture(params=["namespaces", "landlock"])
def layer(request: pytest.FixtureRequest) -> Confinement:
    """The confinement each test runs under: the namespaces (Landlock inside where the
    kernel has it), or Landlock alone as on a machine without user namespaces."""
    if request.param == "namespaces":
        if not isinstance(WRAP, Bubblewrap):
            pytest.skip(f"needs namespaces, which this machine lacks: {WRAP.reason}")
        return Confinement()
    return Confinement(wrap=lambda: NO_NAMESPACES)


def refusals(output: str) -> int:
    return sum(output.count(refusal) for refusal in REFUSED)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A noeta home holding a stand-in of the embedded server's password file, with the
    workspaces root beside it, as the defaults lay them out."""
    path = tmp_path / "home"
    path.mkdir()
    (path / "password").write_text("superuser-password-stand-in\n")
    return path


def task(home: Path, task_id: str) -> ToolContext:
    workspace = home.with_name("home-workspaces") / task_id
    workspace.mkdir(parents=True, exist_ok=True)
    return ToolContext(task_id, "call-1", workspace=str(workspace))


async def bash(ctx: ToolContext, command: str, tool: Bash | Confinement) -> ToolOutput:
    tool = tool if isinstance(tool, Bash) else Bash(confinement=tool)
    return await tool.run({"command": command}, ctx)


@landlock_only
async def test_a_command_cannot_read_another_tasks_workspace(
    home: Path, layer: Confinement
) -> None:
    other = Path(task(home, "b").workspace) / "notes.txt"
    other.write_text("task b's private notes\n")
    output = await bash(task(home, "a"), f"cat {other}; cat ../b/notes.txt; ls ../b", layer)
    assert "private notes" not in output.content and "notes.txt\n" not in output.content
    assert refusals(output.content) == 3, output.content


@landlock_only
async def test_a_command_cannot_read_the_noeta_home_or_its_password(
    home: Path, layer: Confinement
) -> None:
    output = await bash(task(home, "a"), f"cat {home}/password; ls {home}", layer)
    assert "superuser-password-stand-in" not in output.content
    assert refusals(output.content) == 2, output.content


@landlock_only
async def test_a_command_cannot_write_outside_its_workspace(home: Path, layer: Confinement) -> None:
    target = home.parent / "outside"
    target.mkdir()
    command = (
        f"echo x > {target}/new.txt; mkdir {target}/dir; ln -s / {target}/link; "
        f"touch {home}/planted; echo x > /tmp/noeta-confinement-{uuid.uuid4().hex}"
    )
    output = await bash(task(home, "a"), command, layer)
    assert refusals(output.content) == 5, output.content
    assert os.listdir(target) == [] and os.listdir(home) == ["password"]


@landlock_only
async def test_a_command_uses_its_own_workspace_and_ordinary_programs(
    home: Path, layer: Confinement
) -> None:
    ctx = task(home, "a")
    command = (
        "set -e; mkdir -p src && printf 'b\\na\\n' > src/x.txt && sort src/x.txt | head -1; "
        "ls src; grep -c a src/x.txt; sed 's/a/A/' src/x.txt | awk 'NR==2'; "
        "python3 -c 'import json, tempfile; print(json.dumps(tempfile.gettempdir()))'; "
        "mktemp >/dev/null && echo tmp-ok; "
        "git init -q . && git -c user.name=n -c user.email=n@x add src && "
        "git -c user.name=n -c user.email=n@x commit -qm first && git log --format=%s; "
        "rm src/x.txt && rmdir src && echo removed"
    )
    output = await bash(ctx, command, layer)
    tmpdir = Path(ctx.workspace) / ".tmp"
    assert output.content == (
        f'a\nx.txt\n1\nA\n"{tmpdir}"\ntmp-ok\nfirst\nremoved\n[exit code 0]'
    ), output.content


@landlock_only
async def test_a_background_job_is_confined_like_the_call(home: Path, layer: Confinement) -> None:
    ctx = task(home, "a")
    started = await Bash(confinement=layer).run(
        {"command": f"cat {home}/password; echo mine > mine.txt", "run_in_background": True},
        ctx,
    )
    assert started.background is not None
    finished = await run_job(started.background, 8_000)
    assert "superuser-password-stand-in" not in finished.text
    assert refusals(finished.text) == 1, finished.text
    assert (Path(ctx.workspace) / "mine.txt").read_text() == "mine\n"


@landlock_only
async def test_operator_paths_are_readable_or_writable_as_listed(
    home: Path, layer: Confinement
) -> None:
    shared = home.parent / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("shared data\n")
    exchange = home.parent / "exchange"
    exchange.mkdir()
    paths = {"read_paths": (str(shared),), "write_paths": (str(exchange),)}
    tool = Bash(confinement=dataclasses.replace(layer, **paths))
    command = f"cat {shared}/data.txt; echo no > {shared}/data.txt; echo yes > {exchange}/out"
    output = await bash(task(home, "a"), command, tool)
    assert output.content.startswith("shared data\n")
    assert refusals(output.content) == 1, output.content
    assert (shared / "data.txt").read_text() == "shared data\n"
    assert (exchange / "out").read_text() == "yes\n"


@landlock_only
@pytest.mark.skipif(KERNEL.abi < 6, reason="signal and socket scopes need Landlock ABI 6")
async def test_a_command_cannot_signal_the_worker_or_reach_its_abstract_sockets(
    home: Path, layer: Confinement
) -> None:
    name = f"noeta-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(f"\0{name}")
        listener.listen()
        connect = (
            "import socket; s = socket.socket(socket.AF_UNIX); "
            f"s.connect('\\0{name}'); print('connected')"
        )
        command = f'kill -0 {os.getpid()} && echo signalled; python3 -c "{connect}"'
        output = await bash(task(home, "a"), command, layer)
    assert "signalled" not in output.content and "connected" not in output.content
    # Landlock refuses; in a PID and network namespace neither the worker nor its
    # abstract socket exists.
    told = ("Operation not permitted", "No such process", "Connection refused")
    assert sum(output.content.count(word) for word in told) == 2, output.content


def test_every_filesystem_right_the_abi_knows_is_handled() -> None:
    assert handled_rights(1) == (1 << 13) - 1
    assert handled_rights(3) == (1 << 15) - 1
    assert handled_rights(7) == (1 << 16) - 1  # ABI 5 added IOCTL_DEV; 6 and 7 no fs right


async def test_required_confinement_refuses_to_start_without_namespaces(home: Path) -> None:
    required = Bash(confinement=Confinement("required", wrap=lambda: NO_NAMESPACES))
    with pytest.raises(ConfigError, match="confine: required, but simulated: no user namespaces"):
        check_tools_at_start([required])
    with pytest.raises(ToolError, match="must be confined, but simulated: no user namespaces"):
        await bash(task(home, "a"), "true", required)


async def test_unavailable_confinement_warns_once_and_runs_unconfined(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fallback = Bash(confinement=Confinement(probe=lambda: GONE, wrap=lambda: NO_NAMESPACES))
    with caplog.at_level(logging.INFO, logger="noeta.plugins.core.confinement"):
        check_tools_at_start([fallback, Bash(confinement=fallback.confinement)])
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    said = caplog.records[0].getMessage()
    assert "without namespaces: simulated" in said and "can read every file" in said
    output = await bash(task(home, "a"), f"cat {home}/password", fallback)
    assert "superuser-password-stand-in" in output.content  # what the warning warned of


@landlock_only
def test_without_namespaces_start_up_says_landlock_alone_confines_files(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alone = Bash(confinement=Confinement(wrap=lambda: NO_NAMESPACES))
    with caplog.at_level(logging.INFO, logger="noeta.plugins.core.confinement"):
        check_tools_at_start([alone])
    said = caplog.records[0].getMessage()
    assert caplog.records[0].levelname == "WARNING"
    landlock = f"confined to their files by Landlock ABI {KERNEL.abi}"
    assert f"share the worker's network and processes, {landlock}" in said


@landlock_only
@pytest.mark.skipif(not isinstance(WRAP, Bubblewrap), reason="needs namespaces")
def test_start_up_says_commands_are_confined(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="noeta.plugins.core.confinement"):
        check_tools_at_start(plugin({"confine": "required"}).tools())
    assert [r.getMessage().split(": the")[0] for r in caplog.records] == [
        "Bash commands are confined in namespaces (network: proxy) and by Landlock ABI "
        f"{KERNEL.abi}"
    ]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"confine": "yes"}, "confine must be one of auto, required, off"),
        ({"confine_read": "/data"}, "confine_read must be a list of absolute paths"),
        ({"confine_write": ["data"]}, "confine_write: 'data' is not an absolute path"),
        ({"network": "open"}, "network must be one of proxy, none, host, not 'open'"),
        ({"limits": 5}, "limits must be a mapping of processes, memory_mb"),
        ({"limits": {"threads": 5}}, "unknown limit 'threads'; it accepts processes"),
        ({"limits": {"processes": 0}}, "processes must be a whole number above 0"),
        ({"limits": {"memory_mb": "lots"}}, "memory_mb must be a whole number above 0"),
    ],
)
def test_bad_confinement_parameters_are_named(params: dict[str, object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        plugin(params)  # type: ignore[arg-type]


def test_a_listed_path_that_does_not_exist_stops_start_up(tmp_path: Path) -> None:
    tools = plugin({"confine_read": [str(tmp_path / "missing")]}).tools()
    with pytest.raises(ConfigError, match=r"confined path .*missing' does not exist"):
        check_tools_at_start(tools)


def git(cwd: Path, *arguments: str) -> None:
    """Git as the worker runs it for the Agent tool (unconfined), identity given."""
    identity = ["-c", "user.name=noeta", "-c", "user.email=noeta@example.invalid"]
    subprocess.run(["git", *identity, *arguments], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def parent_repository(home: Path) -> Path:
    parent = Path(task(home, "parent").workspace)
    (parent / "plan.txt").write_text("the parent's files\n")
    git(parent, "init", "-q")
    git(parent, "add", "plan.txt")
    git(parent, "commit", "-qm", "plan")
    return parent


@landlock_only
async def test_a_subagents_worktree_uses_its_repository_but_not_its_parents_files(
    home: Path, parent_repository: Path, layer: Confinement
) -> None:
    child = parent_repository.with_name("parent.c1.1")
    git(parent_repository, "worktree", "add", "-q", "-b", "noeta/child", str(child), "HEAD")
    ctx = ToolContext("parent.c1.1", "call-1", workspace=str(child))
    command = (
        "echo work > work.txt && git add work.txt && "
        "git -c user.name=n -c user.email=n@x commit -qm work && git log --format=%s; "
        "cat ../parent/plan.txt"
    )
    output = await bash(ctx, command, layer)
    assert output.content.startswith("work\nplan\n"), output.content
    assert refusals(output.content) == 1 and "the parent's files" not in output.content


@landlock_only
async def test_a_forged_git_pointer_reaches_no_other_repository(
    home: Path, parent_repository: Path, layer: Confinement
) -> None:
    ctx = task(home, "intruder")
    pointer = f"gitdir: {parent_repository}/.git/worktrees/intruder"
    (parent_repository / ".git" / "worktrees" / "intruder").mkdir(parents=True)
    (parent_repository / ".git" / "worktrees" / "intruder" / "gitdir").write_text(
        f"{parent_repository.with_name('someone-else')}/.git\n"  # git lists another worktree
    )
    output = await bash(ctx, f"echo '{pointer}' > .git", layer)
    assert output.content == "(no output)\n[exit code 0]"
    output = await bash(ctx, f"cat {parent_repository}/.git/config", layer)
    assert refusals(output.content) == 1 and "[core]" not in output.content


def documented_core_settings() -> list[tuple[str, dict[str, object]]]:
    """The core plugin's `params:` in every YAML example of the docs."""
    root = Path(__file__).resolve().parents[3]
    found: list[tuple[str, dict[str, object]]] = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "SECURITY.md"]:
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S):
            document = yaml.safe_load(block)
            if not isinstance(document, dict):
                continue
            for entry in document.get("plugins") or []:
                if isinstance(entry, dict) and entry.get("module") == "noeta.plugins.core":
                    found.append((path.name, entry.get("params") or {}))
    return found


def test_the_documented_network_and_limits_settings_are_used() -> None:
    settings = documented_core_settings()
    assert any("network" in params and "limits" in params for _, params in settings)
    for where, params in settings:
        bash = next(tool for tool in plugin(params).tools() if isinstance(tool, Bash))
        confinement = bash.confinement
        assert confinement.network == params.get("network", "proxy"), where
        for name, value in (params.get("limits") or {}).items():  # type: ignore[attr-defined]
            assert getattr(confinement.limits, name) == value, where
