"""Cron files: what a good one reads as, and one exact, one-line error per bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from noeta import yamlfile
from noeta.core.errors import ConfigError
from noeta.scheduler.cronfile import (
    JobAction,
    MessageAction,
    Schedule,
    TaskAction,
    check_cron_file,
    load_cron_files,
)

GOOD = """\
# every field, then the defaults
schedules:
  - name: nightly-report
    schedule: "30 2 * * *"
    timezone: Europe/Berlin
    task:
      prompt: Summarize yesterday's tickets.
      model: anthropic:claude-sonnet-4-5
      queue: reports
      plugins: [core, github]
    overlap: allow
    missed: run_all
    max_catch_up: 3
    enabled: false
  - name: ping
    schedule: "@hourly"
    message: {task: assistant-1, text: "Anything new?"}
"""


def write(directory: Path, text: str, name: str = "cron.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def error(directory: Path, text: str) -> str:
    path = write(directory, text)
    with pytest.raises(ConfigError) as raised:
        load_cron_files([path])
    message = str(raised.value)
    assert "\n" not in message
    prefix = f"{path}, "
    assert message.startswith(prefix), message
    return message.removeprefix(prefix)


def one(body: str) -> str:
    """A file with one schedule whose keys are `body` (indented under `- `)."""
    lines = body.strip("\n").splitlines()
    return "schedules:\n  - " + "\n    ".join(lines) + "\n"


TASK = "task: {prompt: hi, model: 'openai:gpt-4o'}"


def test_a_good_file_reads_every_field_and_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    assert load_cron_files([path]) == [
        Schedule(
            name="nightly-report",
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            action=TaskAction(
                prompt="Summarize yesterday's tickets.",
                model="anthropic:claude-sonnet-4-5",
                queue="reports",
                plugins=("core", "github"),
            ),
            overlap="allow",
            missed="run_all",
            max_catch_up=3,
            enabled=False,
            source=f"{path}, line 3",
        ),
        Schedule(
            name="ping",
            cron="@hourly",
            timezone="UTC",
            action=MessageAction(task="assistant-1", text="Anything new?"),
            overlap="skip",
            missed="run_once",
            max_catch_up=10,
            enabled=True,
            source=f"{path}, line 15",
        ),
    ]


def test_an_empty_plugin_list_means_no_plugin_tools(tmp_path: Path) -> None:
    text = one("name: a\nschedule: '@daily'\ntask: {prompt: p, model: 'openai:m', plugins: []}")
    [schedule] = load_cron_files([write(tmp_path, text)])
    assert isinstance(schedule.action, TaskAction) and schedule.action.plugins == ()


def test_schedules_from_several_files_keep_their_order(tmp_path: Path) -> None:
    first = write(tmp_path, one(f"name: a\nschedule: '@daily'\n{TASK}"), "a.yaml")
    second = write(tmp_path, one(f"name: b\nschedule: '@daily'\n{TASK}"), "b.yaml")
    assert [s.name for s in load_cron_files([first, second])] == ["a", "b"]


def test_a_name_used_in_two_files_is_refused(tmp_path: Path) -> None:
    first = write(tmp_path, one(f"name: a\nschedule: '@daily'\n{TASK}"), "a.yaml")
    second = write(tmp_path, one(f"name: a\nschedule: '@hourly'\n{TASK}"), "b.yaml")
    with pytest.raises(ConfigError) as raised:
        load_cron_files([first, second])
    assert str(raised.value) == (
        f"{second}, line 2: the schedule name 'a' is used already ({first}, line 2)"
    )


def test_a_name_used_twice_in_one_file_is_refused(tmp_path: Path) -> None:
    text = (
        f"schedules:\n  - name: a\n    schedule: '@daily'\n    {TASK}\n"
        f"  - name: a\n    schedule: '@daily'\n    {TASK}\n"
    )
    assert error(tmp_path, text).startswith("line 5: the schedule name 'a' is used already (")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("schedules:\n  - name: [a\n", "line 3, column 1: not valid YAML: "),
        ("", "line 1: the cron file is empty; it needs `schedules:`"),
        ("# nothing yet\n", "line 1: the cron file is empty; it needs `schedules:`"),
        ("- name: a\n", "line 1: the top level must be a mapping with `schedules:`"),
        ("schedule:\n  - name: a\n", "line 1: schedule: unknown key (known: schedules)"),
        ("schedules:\n", "line 1: `schedules:` is missing"),
        ("schedules: {name: a}\n", "line 1: schedules: must be a list of schedules, not a mapping"),
        ("schedules:\n  - just text\n", "line 2: schedules[0]: a schedule is a mapping"),
    ],
)
def test_the_shape_of_the_file(tmp_path: Path, text: str, expected: str) -> None:
    assert error(tmp_path, text).startswith(expected)


def test_an_unquoted_star_schedule_says_to_quote_it(tmp_path: Path) -> None:
    text = one(f"name: a\nschedule: */5 * * * *   # every five minutes\n{TASK}")
    assert error(tmp_path, text) == (
        "line 3, column 16: not valid YAML: YAML reads the * that starts '*/5 * * * *' as an alias "
        '(*name): put the value in quotes: schedule: "*/5 * * * *"'
    )
    text = one(f"name: a\nschedule: * * * * *\n{TASK}")
    assert 'put the value in quotes: schedule: "* * * * *"' in error(tmp_path, text)


@pytest.mark.parametrize(
    ("field", "written", "expected"),
    [
        ("schedule: 12:30", "schedule", "YAML read 12:30 as the number 750: put it in quotes"),
        ("schedule: 5", "schedule", "YAML read 5 as the number 5: put it in quotes"),
        ("timezone: 1:00", "timezone", "YAML read 1:00 as the number 60: put it in quotes"),
    ],
)
def test_a_text_field_yaml_reads_as_a_number_says_to_quote_it(
    tmp_path: Path, field: str, written: str, expected: str
) -> None:
    keys = {"name": "name: a", "schedule": "schedule: '@daily'", written: field}
    text = one("\n".join([*keys.values(), TASK]))
    line = 2 + list(keys).index(written)
    assert (
        error(tmp_path, text)
        == f"line {line}: schedules[0].{written}: must be text, but {expected}"
    )


def test_yes_no_on_off_as_text_are_booleans_in_yaml_and_refused(tmp_path: Path) -> None:
    text = one(f"name: no\nschedule: '@daily'\n{TASK}")
    assert error(tmp_path, text) == (
        "line 2: schedules[0].name: must be text, but YAML read no as the boolean False: "
        "put it in quotes"
    )
    text = one("name: a\nschedule: '@daily'\ntask: {prompt: p, model: 'openai:m', queue: on}")
    assert error(tmp_path, text).startswith(
        "line 4: schedules[0].task.queue: must be text, but YAML read on as the boolean True"
    )


@pytest.mark.parametrize("written", ["yes", "no", "on", "off", "'true'", "1"])
def test_enabled_must_be_written_true_or_false(tmp_path: Path, written: str) -> None:
    text = one(f"name: a\nschedule: '@daily'\n{TASK}\nenabled: {written}")
    message = error(tmp_path, text)
    assert message.startswith("line 5: schedules[0].enabled: write true or false, not ")


@pytest.mark.parametrize(
    ("extra", "line", "expected"),
    [
        ("colour: red", 5, "schedules[0].colour: unknown key (known: name, schedule, "),
        ("overlap: never", 5, "schedules[0].overlap: 'never' is not one of skip, allow"),
        ("missed: all", 5, "schedules[0].missed: 'all' is not one of skip, run_once, run_all"),
        ("max_catch_up: 0", 5, "schedules[0].max_catch_up: 0 is not between 1 and 1000"),
        ("max_catch_up: 1001", 5, "schedules[0].max_catch_up: 1001 is not between 1 and 1000"),
        ("max_catch_up: '10'", 5, "schedules[0].max_catch_up: must be a whole number, but it is"),
        ("max_catch_up: true", 5, "schedules[0].max_catch_up: must be a whole number, but YAML"),
        (
            "message: {task: t, text: x}",
            2,
            "schedules[0]: a schedule has both `task:` and `message:`; keep one",
        ),
    ],
)
def test_bad_schedule_fields(tmp_path: Path, extra: str, line: int, expected: str) -> None:
    text = one(f"name: a\nschedule: '@daily'\n{TASK}\n{extra}")
    assert error(tmp_path, text).startswith(f"line {line}: {expected}")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (f"schedule: '@daily'\n{TASK}", "line 2: schedules[0]: `name:` is missing"),
        (f"name: a\n{TASK}", "line 2: schedules[0]: `schedule:` is missing"),
        (f"name: ''\nschedule: '@daily'\n{TASK}", "line 2: schedules[0].name: must not be empty"),
        (
            f"name: a b\nschedule: '@daily'\n{TASK}",
            "line 2: schedules[0].name: 'a b' must be 1-100",
        ),
        (f"name: {'n' * 101}\nschedule: '@daily'\n{TASK}", "line 2: schedules[0].name: 'nnnn"),
        (
            "name: a\nschedule: '@daily'",
            "line 2: schedules[0]: a schedule needs `task:` (a new task), `message:` (to a task) "
            "or `job:`",
        ),
        ("name: a\nschedule: '@daily'\ntask: go", "line 4: schedules[0].task: must be a mapping"),
        (
            "name: a\nschedule: '@daily'\ntask: {model: 'openai:m'}",
            "line 4: schedules[0].task: `prompt:` is missing",
        ),
        (
            "name: a\nschedule: '@daily'\ntask: {prompt: p}",
            "line 4: schedules[0].task: `model:` is missing",
        ),
        (
            "name: a\nschedule: '@daily'\ntask: {prompt: p, model: gpt-4o}",
            "line 4: schedules[0].task.model: unknown model spec 'gpt-4o'",
        ),
        (
            "name: a\nschedule: '@daily'\ntask:\n  prompt: p\n  model: 'openai:m'\n  agent: x",
            "line 7: schedules[0].task.agent: unknown key "
            "(known: prompt, model, queue, plugins, key, priority, max_cost, max_tokens, "
            "on_budget)",
        ),
        (
            "name: a\nschedule: '@daily'\ntask: {prompt: p, model: 'openai:m', plugins: core}",
            "line 4: schedules[0].task.plugins: must be a list of plugin names",
        ),
        (
            "name: a\nschedule: '@daily'\ntask: {prompt: p, model: 'openai:m', plugins: [a, a]}",
            "line 4: schedules[0].task.plugins: plugin names must be non-empty and listed once",
        ),
        (
            "name: a\nschedule: '@daily'\nmessage: {text: hi}",
            "line 4: schedules[0].message: `task:` is missing",
        ),
        (
            "name: a\nschedule: '@daily'\nmessage: {task: t}",
            "line 4: schedules[0].message: `text:` is missing",
        ),
        (
            "name: a\nschedule: '@daily'\nmessage: {task: t, text: hi, to: me}",
            "line 4: schedules[0].message.to: unknown key (known: task, text)",
        ),
        (
            "name: a\nschedule: '@daily'\nmessage: {task: '../x', text: hi}",
            "line 4: schedules[0].message.task: the task id '../x' (4 characters) is not allowed",
        ),
    ],
)
def test_missing_and_bad_action_fields(tmp_path: Path, body: str, expected: str) -> None:
    assert error(tmp_path, one(body)).startswith(expected)


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("'*/5 * * *'", "'*/5 * * *' has 4 fields; a cron expression has 5"),
        ("'0 0 * * * 2030'", "'0 0 * * * 2030' has 6 fields"),
        ("'61 * * * *'", "'61 * * * *' is not a valid cron expression"),
        ("'0 0 32 * *'", "'0 0 32 * *' is not a valid cron expression"),
        ("'@fortnightly'", "'@fortnightly' has 1 fields"),
        ("'0 0 31 2 *'", "schedule 'a' never fires: '0 0 31 2 *' matches no date in 50 years"),
        ("'0 0 31 4,6,9,11 *'", "schedule 'a' never fires"),
    ],
)
def test_bad_cron_expressions(tmp_path: Path, schedule: str, expected: str) -> None:
    message = error(tmp_path, one(f"name: a\nschedule: {schedule}\n{TASK}"))
    assert message.startswith(f"line 3: schedules[0].schedule: {expected}"), message


@pytest.mark.parametrize(
    ("timezone", "expected"),
    [
        ("Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"),
        ("../../etc/passwd", "'../../etc/passwd' is not a time zone name"),
        ("/etc/localtime", "'/etc/localtime' is not a time zone name"),
        ("Europe/../../../etc/passwd", "'Europe/../../../etc/passwd' is not a time zone name"),
        ("''", "'' is not a time zone name"),
        ("localtime", "'localtime' is each host's own zone, so schedulers on two hosts"),
        ("posixrules", "'posixrules' is each host's own zone"),
    ],
)
def test_bad_time_zones(tmp_path: Path, timezone: str, expected: str) -> None:
    text = one(f"name: a\nschedule: '@daily'\ntimezone: {timezone}\n{TASK}")
    assert error(tmp_path, text).startswith(f"line 4: schedules[0].timezone: {expected}")


def test_anchors_and_aliases_are_refused_before_anything_expands(tmp_path: Path) -> None:
    # "Billion laughs": nine levels of ten aliases each would be 10**9 strings when walked.
    levels = ["a0: &a0 [lol]"] + [
        f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 10)
    ]
    text = "x:\n" + "".join(f"  {level}\n" for level in levels) + "schedules: []\n"
    assert len(text) < 1000
    assert error(tmp_path, text) == (
        "line 2, column 7: anchors and aliases (&name, *name) are not allowed; write the value out"
    )


def test_an_anchor_used_once_for_reuse_is_refused_too(tmp_path: Path) -> None:
    text = (
        "schedules:\n"
        "  - name: a\n    schedule: '@daily'\n    task: &t {prompt: p, model: 'openai:m'}\n"
        "  - name: b\n    schedule: '@hourly'\n    task: *t\n"
    )
    assert error(tmp_path, text).startswith("line 4, column 11: anchors and aliases")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the cron file"):
        load_cron_files([tmp_path / "absent.yaml"])


def test_check_warns_about_a_schedule_that_fires_years_apart(tmp_path: Path) -> None:
    text = (
        f"schedules:\n  - name: leap\n    schedule: '0 0 29 2 *'\n    {TASK}\n"
        f"  - name: yearly\n    schedule: '@yearly'\n    {TASK}\n"
    )
    path = write(tmp_path, text)
    schedules, warnings = check_cron_file(path, now=datetime(2025, 1, 1, tzinfo=UTC))
    assert [s.name for s in schedules] == ["leap", "yearly"]
    assert warnings == [
        f"{path}, line 2: schedule 'leap' (0 0 29 2 *) fires more than a year apart "
        "(next: 2028-02-29 00:00 UTC, then 2032-02-29 00:00 UTC)"
    ]


def test_check_has_no_warnings_for_an_ordinary_file(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    schedules, warnings = check_cron_file(path, now=datetime(2025, 1, 1, tzinfo=UTC))
    assert len(schedules) == 2 and warnings == []


SCHEDULER = Path(__file__).parents[2] / "scheduler"
EXAMPLES = sorted((SCHEDULER / "examples").glob("*.yaml"))


def schema_errors(path: Path) -> list[str]:
    schema = json.loads((SCHEDULER / "cron.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    document = yamlfile.plain(yamlfile.load(path, what="cron file"))
    validator = jsonschema.Draft202012Validator(schema)
    return [error.message for error in validator.iter_errors(document)]


def test_there_are_examples_of_each_kind() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"nightly.yaml", "interactive.yaml", "timezones.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_passes_the_schema_and_the_loader(path: Path) -> None:
    assert schema_errors(path) == []
    assert load_cron_files([path])


@pytest.mark.parametrize(
    "body",
    [
        f"name: a\nschedule: '@daily'\n{TASK}\ncolour: red",
        f"name: a b\nschedule: '@daily'\n{TASK}",
        f"name: a\nschedule: '* * * *'\n{TASK}",
        f"name: a\nschedule: '@DAILY'\n{TASK}",
        f"name: a\nschedule: '@daily'\n{TASK}\nmessage: {{task: t, text: x}}",
        "name: a\nschedule: '@daily'",
        "name: a\nschedule: '@daily'\ntask: {prompt: p, model: gpt-4o}",
        f"name: a\nschedule: '@daily'\n{TASK}\nmax_catch_up: 0",
        f"name: a\nschedule: '@daily'\n{TASK}\nmissed: all",
        f"name: a\nschedule: '@daily'\ntimezone: ../../etc/passwd\n{TASK}",
    ],
)
def test_the_schema_and_the_loader_refuse_the_same_mistakes(tmp_path: Path, body: str) -> None:
    path = write(tmp_path, one(body))
    assert schema_errors(path)
    with pytest.raises(ConfigError):
        load_cron_files([path])


def test_a_relative_script_is_found_beside_the_cron_file(tmp_path: Path) -> None:
    text = one("name: a\nschedule: '@daily'\ntask: {prompt: hi, model: 'scripted:s.yaml'}")
    (schedule,) = load_cron_files([write(tmp_path, text)])
    assert isinstance(schedule.action, TaskAction)
    assert schedule.action.model == f"scripted:{tmp_path / 's.yaml'}"


def test_a_task_or_job_schedule_reads_its_key_and_priority(tmp_path: Path) -> None:
    body = one(
        "name: a\nschedule: '@daily'\n"
        "task: {prompt: hi, model: 'openai:gpt-4o', key: tenant-1, priority: 7}"
    )
    [schedule] = load_cron_files([write(tmp_path, body)])
    assert isinstance(schedule.action, TaskAction)
    assert (schedule.action.key, schedule.action.priority) == ("tenant-1", 7)
    job = one("name: j\nschedule: '@daily'\njob: {name: resize, key: t2, priority: 2}")
    [schedule] = load_cron_files([write(tmp_path, job, "job.yaml")])
    assert isinstance(schedule.action, JobAction)
    assert (schedule.action.key, schedule.action.priority) == ("t2", 2)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ("key: 'a b'", "line 4: schedules[0].task.key: the concurrency key 'a b'"),
        ("priority: 10", "line 4: schedules[0].task.priority: 10 is not between 0 and 9"),
        ("priority: high", "line 4: schedules[0].task.priority: must be a whole number"),
    ],
)
def test_a_bad_key_or_priority_is_refused(tmp_path: Path, fields: str, expected: str) -> None:
    body = one(f"name: a\nschedule: '@daily'\ntask: {{prompt: hi, model: 'openai:m', {fields}}}")
    assert error(tmp_path, body).startswith(expected)
    assert schema_errors(write(tmp_path, body))


def test_a_task_schedule_reads_its_budget(tmp_path: Path) -> None:
    body = one(
        "name: a\nschedule: '@daily'\ntask: {prompt: hi, model: 'openai:gpt-4o', "
        "max_cost: 0.50, max_tokens: 200000, on_budget: ask}"
    )
    path = write(tmp_path, body)
    assert schema_errors(path) == []
    [schedule] = load_cron_files([path])
    assert isinstance(schedule.action, TaskAction)
    assert dict(schedule.action.budget) == {
        "budget_cost": "0.5",
        "budget_tokens": 200000,
        "on_budget": "ask",
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ("max_cost: 0", "line 4: schedules[0].task.max_cost: max cost must be more than 0 USD"),
        ("max_cost: -1", "line 4: schedules[0].task.max_cost: max cost must be more than 0 USD"),
        ("max_cost: lots", "line 4: schedules[0].task.max_cost: max cost 'lots' is not a number"),
        ("max_tokens: 0", "line 4: schedules[0].task.max_tokens: max tokens must be a whole"),
        ("on_budget: bogus", "line 4: schedules[0].task.on_budget: 'bogus' is not one of fail"),
    ],
)
def test_a_bad_budget_is_refused(tmp_path: Path, fields: str, expected: str) -> None:
    body = one(f"name: a\nschedule: '@daily'\ntask: {{prompt: hi, model: 'openai:m', {fields}}}")
    assert error(tmp_path, body).startswith(expected)
    assert schema_errors(write(tmp_path, body))
