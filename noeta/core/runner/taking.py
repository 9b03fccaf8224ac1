"""Taking what a task's inbox holds, one entry per append: a person's answer, a background
job's result (or recording a job as lost), a message. Each entry is taken by the append
that records it, so it is taken exactly once."""

from __future__ import annotations

import logging

from noeta.core.ports.store import InboxEntry
from noeta.core.rules import events as ev
from noeta.core.runner.context import RunContext

log = logging.getLogger(__name__)


async def take_answer(run: RunContext, call_id: str, inbox: list[InboxEntry]) -> bool:
    for entry in inbox:
        answer = entry.payload
        if kind_of(answer) == "answer" and isinstance(answer, dict):
            if answer.get("call_id") != call_id:
                continue
            note = str(answer.get("note") or "")
            allowed = answer.get("decision") == "allow"
            answered = ev.ToolAnswered(call_id, "allow" if allowed else "deny", note, entry.id)
            await run.append([answered], take=[entry.id])
            return True
    return False


def jobs_running_here(run: RunContext) -> set[str]:
    jobs = run.jobs
    return jobs.running(run.claim) & set(run.state.jobs) if jobs else set()


async def take_job_result(run: RunContext, inbox: list[InboxEntry]) -> bool:
    results = job_results(inbox)
    for job_id in run.state.jobs:
        entry = results.get(job_id)
        if entry is not None and isinstance(entry.payload, dict):
            code = entry.payload.get("exit_code")
            finished = ev.JobFinished(
                job_id,
                code if isinstance(code, int) else None,
                str(entry.payload.get("output", "")),
                entry.id,
            )
            await run.append([finished], take=[entry.id])
            return True
    return False


async def record_a_lost_job(run: RunContext, inbox: list[InboxEntry]) -> bool:
    """A job in the log that no result came for and this worker is not running."""
    running, results = jobs_running_here(run), job_results(inbox)
    for job_id in run.state.jobs:
        if job_id not in running and job_id not in results:
            log.warning("task %s: background job %s was lost", run.task_id, job_id)
            run.trace.job_lost(job_id)
            await run.append([ev.JobLost(job_id)])
            return True
    return False


async def take_message(run: RunContext, inbox: list[InboxEntry]) -> bool:
    for entry in inbox:
        if kind_of(entry.payload) != "message":
            continue  # answers, cancels and job results are taken above (or are late)
        text = entry.payload["text"] if isinstance(entry.payload, dict) else entry.payload
        await run.append([ev.MessageTaken(entry.id, str(text))], take=[entry.id])
        return True
    return False


def kind_of(payload: object) -> str:
    """What an inbox entry is: "answer", "cancel", "job", "handback", or else a "message"."""
    kind = payload.get("kind") if isinstance(payload, dict) else None
    return kind if kind in ("answer", "cancel", "job", "handback") else "message"


def job_results(inbox: list[InboxEntry]) -> dict[str, InboxEntry]:
    return {
        str(entry.payload.get("job_id")): entry
        for entry in inbox
        if kind_of(entry.payload) == "job" and isinstance(entry.payload, dict)
    }
