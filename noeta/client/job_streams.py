"""The output of a task's background jobs as readers follow it (ADR-0114): a lane beside
the calls' streams, since a job runs while the task goes on. Rows are keyed (0, the
claim's epoch, n) and read past the cursor's `job_epoch.job_seq`; a job's end is read
from the log (its result comes through the inbox, recorded by whichever claim takes it)."""

from __future__ import annotations

from noeta.client.stream_items import StreamItem, StreamToolOutput
from noeta.client.stream_outcomes import Outcome, job_end
from noeta.core.ports.reply_streams import Chunk, Cursor
from noeta.core.ports.store import Store

MAX_KEPT_ROWS = 5000  # a feed's job rows in memory at most: each job's are bounded anyway


class JobRows:
    """A feed's side: the job rows it read, where it is in the lane, the jobs' ends."""

    def __init__(self) -> None:
        self.rows: list[Chunk] = []
        self.position = (0, 0)  # (epoch, seq) of the last row read
        self.ends: dict[str, Outcome] = {}  # job id -> its end, from the log
        self._log_read_to = 0

    def add(self, rows: list[Chunk]) -> None:
        if rows:
            self.rows = (self.rows + rows)[-MAX_KEPT_ROWS:]
            self.position = (rows[-1].attempt, rows[-1].seq)

    async def read_ends(self, store: Store, task_id: str, last_seq: int) -> None:
        """The jobs' ends the log has up to `last_seq` (read once per process)."""
        if last_seq <= self._log_read_to:
            return
        for stored in await store.read_log(task_id, self._log_read_to):
            end = job_end(stored)
            if end is not None:
                self.ends.setdefault(end.call_id, end)
        self._log_read_to = last_seq


class JobLane:
    """A reader's side: the job output it has shown, and which jobs it saw end."""

    def __init__(self, after: Cursor | None) -> None:
        self.position = after.jobs if after is not None else (0, 0)
        self.lengths: dict[tuple[str, int], int] = {}  # (job, block) -> characters shown
        self.running: set[str] = set()  # jobs whose output was shown, their end not yet
        self.ended: set[str] = set()

    def mark(self, cursor: Cursor) -> Cursor:
        """`cursor` (a place in the calls' streams) with this lane's place."""
        return Cursor(cursor.call_seq, cursor.attempt, cursor.seq, *self.position)

    def take(self, jobs: JobRows, at: Cursor) -> list[StreamItem]:
        """The rows after this lane's place, as items (`at`: the calls' place)."""
        items: list[StreamItem] = []
        for row in jobs.rows:
            if (row.attempt, row.seq) <= self.position:
                continue
            self.position = (row.attempt, row.seq)
            if row.call_id in self.ended or row.kind not in ("stdout", "stderr", "truncated"):
                continue
            key = (row.call_id, row.block)
            shown = self.lengths.get(key, 0)
            text = row.data[max(0, shown - row.char_offset) :]  # written twice: the new part
            self.lengths[key] = max(shown, row.char_offset + len(row.data))
            if text:
                self.running.add(row.call_id)
                item = StreamToolOutput(row.call_id, 0, row.kind, text, self.mark(at))
                items.append(item)
        return items

    def settle(self, jobs: JobRows, at: Cursor) -> list[StreamItem]:
        """The ends of the jobs shown running that the log has now: final, or lost."""
        items: list[StreamItem] = []
        for job_id in sorted(self.running & jobs.ends.keys()):
            self.running.discard(job_id)
            self.ended.add(job_id)
            items.append(jobs.ends[job_id].item(self.mark(at), 0))
        return items
