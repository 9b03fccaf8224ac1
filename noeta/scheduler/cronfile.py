"""Cron files: the schedules `noeta scheduler` fires, read and checked field by field.

Every error is one line naming the file, the line and the field
(`cron.yaml, line 7: schedules[1].schedule: …`); the format is in scheduler/README.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from noeta import yamlfile
from noeta.backends.models.registry import stored_spec
from noeta.client.submissions import BUDGET_POLICIES, checked_budget
from noeta.core.errors import ConfigError, PayloadError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import DEFAULT_PRIORITY, DEFAULT_QUEUE, check_key
from noeta.core.ports.store_values import MAX_PRIORITY
from noeta.core.rules.task_id import check_concurrency_key, check_task_id
from noeta.scheduler import slots

Overlap = Literal["skip", "allow"]
Missed = Literal["skip", "run_once", "run_all"]
OVERLAPS: tuple[Overlap, ...] = ("skip", "allow")
MISSED: tuple[Missed, ...] = ("skip", "run_once", "run_all")
MAX_CATCH_UP = 1000
NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# A next fire further away than this is probably a mistake (0 0 29 2 * fires every 4 years).
RARE = timedelta(days=366)

_SCHEDULE_KEYS = (
    "name",
    "schedule",
    "timezone",
    "task",
    "message",
    "job",
    "overlap",
    "missed",
    "max_catch_up",
    "enabled",
)
_TASK_KEYS = (
    "prompt",
    "model",
    "queue",
    "plugins",
    "key",
    "priority",
    "max_cost",
    "max_tokens",
    "on_budget",
)
_MESSAGE_KEYS = ("task", "text")
_JOB_KEYS = ("name", "input", "queue", "key", "priority")


@dataclass(frozen=True, slots=True)
class TaskAction:
    """A fire creates a new task."""

    prompt: str
    model: str  # a model spec: anthropic:MODEL, openai:MODEL or scripted:FILE
    queue: str = DEFAULT_QUEUE
    plugins: tuple[str, ...] | None = None  # names of the config's plugins; None = all
    key: str | None = None  # its concurrency key (a tenant), counted by the queue's limits
    priority: int = DEFAULT_PRIORITY
    # Its budget: TaskCreated's fields, as `checked_budget` made them (ADR-0107).
    budget: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, slots=True)
class MessageAction:
    """A fire delivers a message to an existing (interactive) task."""

    task: str  # the task id
    text: str


@dataclass(frozen=True, slots=True)
class JobAction:
    """A fire enqueues a plain job: one call of a `@noeta.tool` function (docs/api.md);
    the scheduler checks the name and input against the config's plugins at start."""

    name: str
    input: dict[str, JSONValue]
    queue: str = DEFAULT_QUEUE
    key: str | None = None
    priority: int = DEFAULT_PRIORITY


@dataclass(frozen=True, slots=True)
class Schedule:
    """One schedule of a cron file: when (cron, timezone), what (action), and its policies."""

    name: str
    cron: str  # as written: 5 fields, or an alias such as @daily (slots.expand reads both)
    timezone: str  # an IANA name
    action: TaskAction | MessageAction | JobAction
    overlap: Overlap = "skip"  # skip: no fire while the previous fire's task is unfinished
    missed: Missed = "run_once"  # what to do with the slots missed while down
    max_catch_up: int = 10  # run_all fires at most this many missed slots (the latest)
    enabled: bool = True
    source: str = ""  # "path, line N", for messages


def load_cron_files(paths: Sequence[str | Path]) -> list[Schedule]:
    """Every schedule of every file, in order; ConfigError at the first problem, including
    a name used twice (in one file or across files)."""
    schedules: list[Schedule] = []
    seen: dict[str, Schedule] = {}
    for path in paths:
        for schedule in _read(path):
            if schedule.name in seen:
                raise ConfigError(
                    f"{schedule.source}: the schedule name {schedule.name!r} is used "
                    f"already ({seen[schedule.name].source})"
                )
            seen[schedule.name] = schedule
            schedules.append(schedule)
    return schedules


def check_cron_file(
    path: str | Path, *, now: datetime | None = None
) -> tuple[list[Schedule], list[str]]:
    """The file's schedules and the warnings worth showing (for `noeta cron validate`);
    ConfigError for anything that is an error."""
    schedules = load_cron_files([path])
    now = now or datetime.now(UTC)
    warnings = []
    for schedule in schedules:
        first = slots.next_slot(schedule.cron, schedule.timezone, now)
        second = first and slots.next_slot(schedule.cron, schedule.timezone, first)
        if first is None or second is None:  # never fires: refused while loading
            continue
        gap = max(first - now, second - first)
        if gap > RARE:
            warnings.append(
                f"{schedule.source}: schedule {schedule.name!r} ({schedule.cron}) fires "
                f"more than a year apart (next: {first:%Y-%m-%d %H:%M} UTC, then "
                f"{second:%Y-%m-%d %H:%M} UTC)"
            )
    return schedules, warnings


def _read(path: str | Path) -> list[Schedule]:
    document = yamlfile.load(path, what="cron file")
    if document is None:
        raise ConfigError(f"{path}, line 1: the cron file is empty; it needs `schedules:`")
    if not isinstance(document, dict):
        raise ConfigError(f"{path}, line 1: the top level must be a mapping with `schedules:`")
    field = _Field(str(path), document, "")
    field.refuse_unknown(("schedules",))
    items = field.require("schedules")
    if not isinstance(items, list):
        raise field.error("schedules", f"must be a list of schedules, not {_kind(items)}")
    return [
        _schedule(str(path), item, index, yamlfile.line_of(items, index))
        for index, item in enumerate(items)
    ]


def _schedule(path: str, item: Any, index: int, line: int) -> Schedule:
    where = f"schedules[{index}]"
    if not isinstance(item, dict):
        raise ConfigError(f"{path}, line {line}: {where}: a schedule is a mapping")
    field = _Field(path, item, where)
    field.refuse_unknown(_SCHEDULE_KEYS)
    name = field.text("name", required=True)
    if not NAME.fullmatch(name):
        raise field.error("name", f"{name!r} must be 1-100 letters, digits, '_', '.' or '-'")
    cron = field.text("schedule", required=True)
    try:
        slots.expand(cron)
    except ConfigError as error:
        raise field.error("schedule", str(error)) from None
    timezone = field.text("timezone", default="UTC")
    try:
        slots.zone(timezone)
    except ConfigError as error:
        raise field.error("timezone", str(error)) from None
    if slots.next_slot(cron, timezone, datetime.now(UTC)) is None:
        raise field.error(
            "schedule", f"schedule {name!r} never fires: {cron!r} matches no date in 50 years"
        )
    return Schedule(
        name=name,
        cron=cron,
        timezone=timezone,
        action=_action(field),
        overlap=field.choice("overlap", OVERLAPS, default="skip"),
        missed=field.choice("missed", MISSED, default="run_once"),
        max_catch_up=field.integer("max_catch_up", default=10, low=1, high=MAX_CATCH_UP),
        enabled=field.boolean("enabled", default=True),
        source=f"{path}, line {field.line(None)}",
    )


def _action(field: _Field) -> TaskAction | MessageAction | JobAction:
    given = [key for key in ("task", "message", "job") if key in field.mapping]
    if not given:
        raise field.error(
            None, "a schedule needs `task:` (a new task), `message:` (to a task) or `job:`"
        )
    if len(given) > 1:
        both = " and ".join(f"`{key}:`" for key in given)
        raise field.error(None, f"a schedule has both {both}; keep one")
    inner = field.inner(given[0])
    if given[0] == "job":
        inner.refuse_unknown(_JOB_KEYS)
        arguments = inner.mapping.get("input", {})
        if not isinstance(arguments, dict):
            raise inner.error("input", "a job's input is a mapping of its arguments")
        return JobAction(
            name=inner.text("name", required=True),
            input=arguments,
            queue=inner.key("queue", "queue name", default=DEFAULT_QUEUE),
            key=inner.concurrency_key(),
            priority=inner.integer("priority", default=DEFAULT_PRIORITY, low=0, high=MAX_PRIORITY),
        )
    if given[0] == "message":
        inner.refuse_unknown(_MESSAGE_KEYS)
        task = inner.key("task", "task id")
        try:
            check_task_id(task)
        except PayloadError as error:
            raise inner.error("task", str(error)) from None
        return MessageAction(task=task, text=inner.text("text", required=True))
    inner.refuse_unknown(_TASK_KEYS)
    model = inner.text("model", required=True)
    try:
        model = stored_spec(model, Path(field.path).parent)  # a script beside the cron file
    except ConfigError as error:
        raise inner.error("model", str(error)) from None
    return TaskAction(
        prompt=inner.text("prompt", required=True),
        model=model,
        queue=inner.key("queue", "queue name", default=DEFAULT_QUEUE),
        plugins=inner.names("plugins"),
        key=inner.concurrency_key(),
        priority=inner.integer("priority", default=DEFAULT_PRIORITY, low=0, high=MAX_PRIORITY),
        budget=_budget(inner),
    )


def _budget(field: _Field) -> tuple[tuple[str, object], ...]:
    """`max_cost:` (USD, a number or text), `max_tokens:`, `on_budget:` (fail or ask)."""
    cost, tokens = field.mapping.get("max_cost"), field.mapping.get("max_tokens")
    if isinstance(cost, bool) or not isinstance(cost, int | float | str | None):
        raise field.error("max_cost", f"must be a number of USD, not {_kind(cost)}")
    policy = field.choice("on_budget", BUDGET_POLICIES, default="fail")
    fields: dict[str, object] = {}
    for key, cost_given, tokens_given in (("max_cost", cost, None), ("max_tokens", None, tokens)):
        try:
            given = None if cost_given is None else str(cost_given)
            fields |= checked_budget(given, tokens_given, policy)
        except ConfigError as error:
            raise field.error(key, str(error)) from None
    return tuple(fields.items())


class _Field:
    """Reads the fields of one mapping; each error names the file, the line and the field."""

    def __init__(self, path: str, mapping: dict[str, Any], where: str) -> None:
        self.path = path
        self.mapping = mapping
        self.where = where

    def line(self, key: str | None) -> int:
        return yamlfile.line_of(self.mapping, key)

    def error(self, key: str | None, message: str) -> ConfigError:
        dotted = ".".join(part for part in (self.where, key) if part)
        prefix = f"{dotted}: " if dotted else ""
        return ConfigError(f"{self.path}, line {self.line(key)}: {prefix}{message}")

    def refuse_unknown(self, known: Sequence[str]) -> None:
        for key in self.mapping:
            if key not in known:
                raise self.error(key, f"unknown key (known: {', '.join(known)})")

    def require(self, key: str) -> Any:
        if key not in self.mapping or self.mapping[key] is None:
            raise self.error(None, f"`{key}:` is missing")
        return self.mapping[key]

    def inner(self, key: str) -> _Field:
        value = self.mapping[key]
        if not isinstance(value, dict):
            raise self.error(key, f"must be a mapping, not {_kind(value)}")
        return _Field(self.path, value, f"{self.where}.{key}")

    def text(self, key: str, *, required: bool = False, default: str = "") -> str:
        if key not in self.mapping and not required:
            return default
        value = self.require(key) if required else self.mapping[key]
        if not isinstance(value, str):
            raise self.error(key, f"must be text, but {self._read_as(key, value)}")
        if required and not value.strip():
            raise self.error(key, "must not be empty")
        if "\x00" in value:
            raise self.error(key, "must not contain a NUL character")
        return value

    def key(self, key: str, kind: str, *, default: str | None = None) -> str:
        value = self.text(key, required=default is None, default=default or "")
        try:
            return check_key(kind, value)
        except PayloadError as error:
            raise self.error(key, str(error)) from None

    def concurrency_key(self) -> str | None:
        """`key:`, a task's concurrency key (the task id rule), or None if absent."""
        if "key" not in self.mapping:
            return None
        try:
            return check_concurrency_key(self.text("key", required=True))
        except PayloadError as error:
            raise self.error("key", str(error)) from None

    def choice(self, key: str, choices: tuple[Any, ...], *, default: str) -> Any:
        value = self.text(key, default=default)
        if value not in choices:
            raise self.error(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def integer(self, key: str, *, default: int, low: int, high: int) -> int:
        value = self.mapping.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(key, f"must be a whole number, but {self._read_as(key, value)}")
        if not low <= value <= high:
            raise self.error(key, f"{value} is not between {low} and {high}")
        return value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self.mapping.get(key, default)
        written = getattr(self.mapping, "texts", {}).get(key, "").lower()
        # YAML 1.1 (PyYAML) reads yes/no/on/off as booleans, YAML 1.2 tools as text.
        if not isinstance(value, bool) or (key in self.mapping and written not in _BOOLEANS):
            shown = repr(value) if isinstance(value, str) else written or _kind(value)
            raise self.error(
                key,
                f"write true or false, not {shown} (YAML 1.1 reads yes/no/on/off as booleans, "
                "YAML 1.2 as text)",
            )
        return value

    def names(self, key: str) -> tuple[str, ...] | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
            raise self.error(key, "must be a list of plugin names (from the noeta config)")
        if any(not name.strip() for name in value) or len(set(value)) != len(value):
            raise self.error(key, "plugin names must be non-empty and listed once each")
        return tuple(value)

    def _read_as(self, key: str, value: Any) -> str:
        written = getattr(self.mapping, "texts", {}).get(key)
        if isinstance(value, str):
            return f"it is the text {value!r}"
        if written is None or isinstance(value, dict | list):
            return f"it is {_kind(value)}"
        return f"YAML read {written} as {_kind(value)} {value!r}: put it in quotes"


_BOOLEANS = ("true", "false")


def _kind(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "the boolean"
    if isinstance(value, int | float):
        return "the number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"  # a date or timestamp, say
