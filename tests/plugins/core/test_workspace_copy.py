"""A fork's copy of its source's workspace (ADR-0096), the source written as a hostile model
would: links are copied as links and never read through, FIFOs left out without a hang,
a sparse file refused by its apparent size, and no hook, fsmonitor or filter the source's
repository names runs; the copy is made once, and a cut-short attempt is made again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from noeta.core.ports.workspace_copy import WorkspaceNotCopied
from noeta.plugins.core.confinement import Confinement
from noeta.plugins.core.landlock import Availability
from noeta.plugins.core.workspace_copy import COPIED_MARKS, CopyLimits, WorkspaceCopies
from noeta.plugins.core.worktrees import Worktrees

# Git runs unconfined here (as on a machine without namespaces or Landlock): what keeps
# the repository's programs from running is the switched-off config alone.
UNCONFINED = Confinement(
    mode="off", probe=lambda: Availability(0, "off"), wrap=lambda: Availability(0, "off")
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces"
    (path / "t").mkdir(parents=True)
    return path


def copies(**limits: int) -> WorkspaceCopies:
    return WorkspaceCopies(Worktrees(UNCONFINED), CopyLimits(**limits))


def git(cwd: Path, *arguments: str) -> str:
    """git as a test reads a repository: nothing the repository's config names runs."""
    safe = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    done = subprocess.run(
        ["git", *safe, *identity, *arguments], cwd=cwd, check=True, capture_output=True
    )
    return done.stdout.decode()


async def test_links_are_copied_as_links_never_read_through(root: Path, tmp_path: Path) -> None:
    source = root / "t"
    (source / "notes.txt").write_text("mine\n")
    (source / "sub").mkdir()
    (source / "sub" / "deep.txt").write_text("deep\n")
    (root / "other").mkdir()
    (root / "other" / "secret.txt").write_text("another task's\n")
    os.symlink("/etc/passwd", source / "passwd")
    os.symlink("../other", source / "other-task")
    os.symlink(str(root / "other" / "secret.txt"), source / "sub" / "secret")
    await copies().copy(str(source), str(root / "f"), "fork/f")
    fork = root / "f"
    assert (fork / "notes.txt").read_text() == "mine\n"
    assert (fork / "sub" / "deep.txt").read_text() == "deep\n"
    for link, leads_to in {
        "passwd": "/etc/passwd",
        "other-task": "../other",
        "sub/secret": str(root / "other" / "secret.txt"),
    }.items():
        assert (fork / link).is_symlink() and os.readlink(fork / link) == leads_to
    # Nothing was read through a link: the only files are the source's own.
    files = sorted(p.relative_to(fork).as_posix() for p in fork.rglob("*") if not p.is_symlink())
    assert files == ["notes.txt", "sub", "sub/deep.txt"]


async def test_a_fifo_is_left_out_and_the_copy_does_not_hang(root: Path) -> None:
    source = root / "t"
    os.mkfifo(source / "pipe")
    (source / "kept.txt").write_text("kept\n")
    await copies().copy(str(source), str(root / "f"), "fork/f")
    assert sorted(os.listdir(root / "f")) == ["kept.txt"]


async def test_a_sparse_file_is_refused_by_its_apparent_size(root: Path) -> None:
    source = root / "t"
    (source / "huge").touch()
    os.truncate(source / "huge", 100 * 2**30)  # 100 GB of holes: reading it would not end
    with pytest.raises(WorkspaceNotCopied, match="over 1073741824 bytes"):
        await copies().copy(str(source), str(root / "f"), "fork/f")
    assert sorted(os.listdir(root)) == ["t"]  # no fork folder, no partial copy left


async def test_too_many_entries_are_refused(root: Path) -> None:
    for n in range(6):
        (root / "t" / f"{n}.txt").write_text("x")
    with pytest.raises(WorkspaceNotCopied, match="over 5 entries"):
        await copies(max_entries=5).copy(str(root / "t"), str(root / "f"), "fork/f")


async def test_a_source_not_on_this_host_is_said_so(root: Path) -> None:
    with pytest.raises(WorkspaceNotCopied, match="there is none on this host"):
        await copies().copy(str(root / "gone"), str(root / "f"), "fork/f")


async def test_the_copy_is_made_once_and_a_cut_attempt_again(root: Path) -> None:
    source = root / "t"
    (source / "a.txt").write_text("source\n")
    # An attempt cut short before its mark: half a copy in the fork's folder, a partial.
    (root / "f").mkdir()
    (root / "f" / "half.txt").write_text("half\n")
    (root / ".workspace-copy-f.old").mkdir()
    (root / ".workspace-copy-f.x.under_way").mkdir()  # fork "f.x"'s copy: not f's to remove
    await copies().copy(str(source), str(root / "f"), "fork/f")
    assert sorted(os.listdir(root / "f")) == ["a.txt"]
    assert sorted(os.listdir(root)) == [COPIED_MARKS, ".workspace-copy-f.x.under_way", "f", "t"]
    # The fork runs on: its own files are never copied over by a later claim's copy.
    (root / "f" / "a.txt").unlink()
    (root / "f" / "b.txt").write_text("the fork's\n")
    await copies().copy(str(source), str(root / "f"), "fork/f")
    assert sorted(os.listdir(root / "f")) == ["b.txt"]


async def test_a_git_workspace_forks_onto_a_branch_and_runs_none_of_its_programs(
    root: Path, tmp_path: Path
) -> None:
    source = root / "t"
    git(source, "init", "-q", "-b", "work")
    (source / "tracked.txt").write_text("committed\n")
    (source / "gone.txt").write_text("committed, then removed\n")
    (source / ".gitattributes").write_text("*.txt filter=evil\n")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "one")
    ran = tmp_path / "ran"
    ran.mkdir()
    program = tmp_path / "program.sh"
    program.write_text(f'#!/bin/sh\ntouch "{ran}/$(basename "$0")-$$"\ncat\n')
    program.chmod(0o755)
    hooks = source / ".git" / "hooks"
    for hook in ("post-checkout", "post-index-change", "reference-transaction"):
        (hooks / hook).write_text(f'#!/bin/sh\ntouch "{ran}/{hook}"\n')
        (hooks / hook).chmod(0o755)
    git(source, "config", "core.fsmonitor", str(program))
    git(source, "config", "filter.evil.smudge", str(program))
    git(source, "config", "filter.evil.clean", str(program))
    # The source as it is now: an uncommitted change, a new file, a removed one.
    (source / "tracked.txt").write_text("changed, not committed\n")
    (source / "new.txt").write_text("untracked\n")
    (source / "gone.txt").unlink()

    await copies().copy(str(source), str(root / "f"), "fork/f")
    fork = root / "f"
    assert os.listdir(ran) == []  # no hook, fsmonitor or filter ran
    assert git(fork, "rev-parse", "--abbrev-ref", "HEAD").strip() == "fork/f"
    assert git(fork, "rev-parse", "HEAD") == git(source, "rev-parse", "work")
    assert (fork / "tracked.txt").read_text() == "changed, not committed\n"
    status = git(fork, "-c", "filter.evil.clean=", "status", "--porcelain").splitlines()
    assert sorted(status) == [" D gone.txt", " M tracked.txt", "?? new.txt"]
    # The fork's worktree is the source repository's, listed back (as a subagent's is).
    assert (fork / ".git").is_file()
    assert str(fork) in git(source, "worktree", "list")


async def test_a_repository_without_a_commit_fails_the_copy_saying_what_git_said(
    root: Path,
) -> None:
    git(root / "t", "init", "-q")
    (root / "t" / "a.txt").write_text("never committed\n")
    with pytest.raises(WorkspaceNotCopied, match=r"the copy failed: git worktree failed: .*HEAD"):
        await copies().copy(str(root / "t"), str(root / "f"), "fork/f")
    assert sorted(os.listdir(root)) == ["t"]  # nothing of the fork left
