"""`noeta cron validate` and `noeta cron list` as a user runs them, and their bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from noeta.cli.main import cli

CRON = """\
schedules:
  - name: nightly
    schedule: "30 2 * * *"
    timezone: Europe/Berlin
    task: {prompt: Report., model: "anthropic:claude-sonnet-4-5"}
  - name: ping
    schedule: "@hourly"
    message: {task: assistant-1, text: ping}
    enabled: false
"""


def noeta(*arguments: str) -> Result:
    return CliRunner().invoke(cli, list(arguments), prog_name="noeta")


def write(directory: Path, text: str, name: str = "cron.yaml") -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


def test_validate_says_ok_and_counts_the_schedules(tmp_path: Path) -> None:
    result = noeta("cron", "validate", write(tmp_path, CRON))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "ok: 2 schedules\n", "")


def test_validate_prints_warnings_and_still_exits_zero(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "schedules:\n  - name: leap\n    schedule: '0 0 29 2 *'\n"
        "    task: {prompt: p, model: 'openai:gpt-4o'}\n",
    )
    result = noeta("cron", "validate", path)
    assert result.exit_code == 0 and result.stdout == "ok: 1 schedule\n"
    [warning] = result.stderr.splitlines()
    assert warning.startswith(f"warning: {path}, line 2: schedule 'leap' (0 0 29 2 *) fires ")


def test_validate_prints_one_line_for_an_error_and_exits_one(tmp_path: Path) -> None:
    path = write(tmp_path, CRON.replace('"30 2 * * *"', "*/5 * * * *"))
    result = noeta("cron", "validate", path)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"noeta: error: {path}, line 3, column 16: not valid YAML: YAML reads the * that starts "
        "'*/5 * * * *' as an alias (*name): put the value in quotes: "
        'schedule: "*/5 * * * *"\n'
    )


def test_validate_refuses_a_name_used_in_two_files(tmp_path: Path) -> None:
    first, second = write(tmp_path, CRON, "a.yaml"), write(tmp_path, CRON, "b.yaml")
    result = noeta("cron", "validate", first, second)
    assert result.exit_code == 1
    assert result.stderr == (
        f"noeta: error: {second}, line 2: the schedule name 'nightly' is used already "
        f"({first}, line 2)\n"
    )


def test_list_shows_each_schedule_with_its_next_fire_in_utc_and_local_time(
    tmp_path: Path,
) -> None:
    result = noeta("cron", "list", write(tmp_path, CRON), "--after", "2025-03-29T12:00")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "name     schedule    timezone       enabled  next (UTC)        next (local)",
        "nightly  30 2 * * *  Europe/Berlin  yes      2025-03-30 01:30  2025-03-30 03:30 CEST",
        "ping     @hourly     UTC            no       2025-03-29 13:00  2025-03-29 13:00 UTC",
    ]


def test_list_json_has_every_field(tmp_path: Path) -> None:
    path = write(tmp_path, CRON)
    result = noeta("cron", "list", "--json", path, "--after", "2025-10-26T00:30")
    assert result.exit_code == 0, result.stderr
    nightly, ping = json.loads(result.stdout)
    assert nightly == {
        "name": "nightly",
        "schedule": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "task": {
            "prompt": "Report.",
            "model": "anthropic:claude-sonnet-4-5",
            "queue": "default",
            "plugins": None,
        },
        "overlap": "skip",
        "missed": "run_once",
        "max_catch_up": 10,
        "enabled": True,
        "source": f"{path}, line 2",
        # 02:30 comes twice in Berlin that night; it fired at the first (00:30 UTC).
        "next_utc": "2025-10-27T01:30:00+00:00",
        "next_local": "2025-10-27T02:30:00+01:00",
    }
    assert ping["message"] == {"task": "assistant-1", "text": "ping"}
    assert ping["enabled"] is False and "task" not in ping


def test_list_of_a_bad_file_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, CRON.replace("Europe/Berlin", "Europe/Atlantis"))
    result = noeta("cron", "list", path)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"noeta: error: {path}, line 4: schedules[0].timezone: unknown time zone "
        "'Europe/Atlantis' (use an IANA name like Europe/Berlin)\n"
    )


def test_the_installed_command_has_the_cron_group(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "noeta", "cron", "validate", write(tmp_path, CRON)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "ok: 2 schedules\n"), result.stderr


def test_history_of_an_unknown_schedule_lists_the_known_ones(tmp_path: Path) -> None:
    import asyncio
    from datetime import UTC, datetime

    from noeta.backends.stores import open_store
    from tests.cli.test_run import noeta as run_noeta
    from tests.cli.test_run import one_line_error

    url = f"sqlite:///{tmp_path / 'n.db'}"
    nothing = one_line_error(run_noeta("cron", "history", "nightly", store=url))
    assert nothing == (
        "noeta: error: no schedule named 'nightly' in this store; "
        "known: none yet (no scheduler has run one)"
    )

    async def register() -> None:
        store = await open_store(url)
        try:
            await store.cron_marks(["nightly", "hourly"], datetime.now(UTC))
        finally:
            await store.close()

    asyncio.run(register())
    unknown = one_line_error(run_noeta("cron", "history", "nightlyy", store=url))
    assert unknown.endswith("no schedule named 'nightlyy' in this store; known: hourly, nightly")
    known = run_noeta("cron", "history", "nightly", store=url)
    assert known.returncode == 0 and known.stdout == "no slot of 'nightly' has been handled yet\n"


REPOSITORY = Path(__file__).parents[2]
JOB_CRON = """\
schedules:
  - name: thumbs
    schedule: "@hourly"
    job: {name: JOB, input: {image: a.png, width: 3}}
"""


def validate_jobs(tmp_path: Path, job: str, *options: str) -> subprocess.CompletedProcess[str]:
    """Through the real executable: which jobs exist depends on what the process imported."""
    config = write(tmp_path, "plugins:\n  - module: tests.client.jobs_for_tests\n", "noeta.yaml")
    arguments = [arg.replace("CONFIG", config) for arg in options]
    cron = write(tmp_path, JOB_CRON.replace("JOB", job))
    return subprocess.run(
        [str(Path(sys.executable).parent / "noeta"), "cron", "validate", cron, *arguments],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        timeout=60,
        check=False,
    )


def test_validate_finds_a_job_in_the_modules_its_config_names(tmp_path: Path) -> None:
    result = validate_jobs(tmp_path, "resize", "--config", "CONFIG")
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok: 1 schedule\n", "")


def test_validate_refuses_a_job_no_module_of_the_config_defines(tmp_path: Path) -> None:
    result = validate_jobs(tmp_path, "refund", "--config", "CONFIG")
    [line] = result.stderr.splitlines()
    assert result.returncode == 1 and "schedule 'thumbs': no job named 'refund'" in line
    assert "known: " in line and "resize," in line


def test_validate_without_a_config_refuses_a_job_and_says_to_give_one(tmp_path: Path) -> None:
    result = validate_jobs(tmp_path, "resize")
    [line] = result.stderr.splitlines()
    assert result.returncode == 1 and "no job named 'resize'" in line
    assert "--config FILE" in line and "import the module that defines it" not in line
