"""Where a no-op job's time goes: one `noeta worker` of a checkout drains N no-op jobs
(with --agent: N one-shot scripted agent tasks, as bench/worker.py's drain) while py-spy
samples it (only where the event loop holds the GIL, `--gil`) and pg_stat_activity is
read every 10 ms; prints tasks/s, worker and server CPU a task, how busy each was over
the drain, what the worker's backends were doing, and the py-spy functions with the most
samples (inclusive). With --phases, where a generation of an agent drain spends its time
(bench/drain_phases.py).

Run from outside any checkout (a worker's working directory must not shadow PYTHONPATH):
  cd /tmp && <venv>/bin/python <checkout>/bench/job_profile.py --tree <a checkout> \
      [--jobs 10000] [--concurrency 16] [--py-spy <path to py-spy>] [--agent [--phases]]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import tempfile
import time
from pathlib import Path

import drain_phases
import jobs  # the sibling modules: bench/ is on sys.path
import noop_job
from common import server
from worker import cpu_seconds, fresh_bench, server_cpu_seconds

# An agent task's drain: from its first write after a claim to the last finish.
AGENT_DRAIN = """
SELECT extract(epoch FROM max(e.created_at) FILTER (WHERE e.type = 'TaskFinished')
                        - min(e.created_at) FILTER (WHERE e.type = 'PluginsPinned'))
  FROM events e WHERE e.task_id LIKE %s
"""
BACKENDS = r"""
SELECT state, coalesce(wait_event_type, '-') || ':' || coalesce(wait_event, '-'),
       left(regexp_replace(ltrim(query), '\s+', ' ', 'g'), 40)
  FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND backend_type = 'client backend' AND application_name <> 'bench-submit'
"""


async def profile(
    dsn: str,
    tree: str,
    count: int,
    concurrency: int,
    spy: str | None,
    function: str,
    agent: bool,
    phases: bool,
) -> None:
    recorded = Path(tempfile.mkdtemp(prefix="noeta-drain-phases-")) / "phases.txt"
    async with fresh_bench(dsn) as bench:
        job_bench = jobs.JobBench(bench, noop_job.FUNCTIONS[function])
        job_bench.env.update(worker_env(tree, recorded if phases else None))
        if agent:
            ids = [f"prof-{n}" for n in range(count)]
            later = await bench.value("SELECT clock_timestamp() + interval '1 hour'")
            await bench.create(ids, "prof", bench.ok_model, ready_at=later)
            await bench.admin.execute("VACUUM (ANALYZE) tasks")
        else:
            ids = await job_bench.held_back("prof", count, "1 hour")
        samples = Path(tempfile.mkdtemp(prefix="noeta-job-profile-")) / "samples.txt"
        async with bench.workers(["prof-w0"], "prof", concurrency, env=job_bench.env) as up:
            pid = up[0].pid
            sampler = await start_sampler(spy, pid, samples) if spy else None
            worker_cpu, server_cpu = cpu_seconds(pid), server_cpu_seconds(bench.postmaster)
            worker_sys = system_seconds(pid)
            began = time.monotonic()
            await bench.admin.execute(jobs.RELEASE, ("prof",))
            seen: collections.Counter[tuple[str, ...]] = collections.Counter()
            reads = 0

            async def read_backends() -> None:
                nonlocal reads
                while True:
                    seen.update(tuple(row) for row in await bench.rows(BACKENDS))
                    reads += 1
                    await asyncio.sleep(0.01)

            reading = asyncio.create_task(read_backends())
            await bench.finished("prof", ids, within=900)
            reading.cancel()
            wall = time.monotonic() - began
            worker_cpu = cpu_seconds(pid) - worker_cpu
            worker_sys = system_seconds(pid) - worker_sys
            server_cpu = server_cpu_seconds(bench.postmaster) - server_cpu
            if sampler is not None:
                sampler.send_signal(2)  # SIGINT: py-spy writes what it sampled
                await sampler.wait()
        drain = AGENT_DRAIN if agent else jobs.DRAIN
        seconds = float(await bench.value(drain, ("prof-%",)))
    print(
        f"{count / seconds:,.0f} {'tasks' if agent else 'jobs'}/s; CPU a "
        f"{'task' if agent else 'job'}: worker {worker_cpu * 1e3 / count:.3f} ms, "
        f"(of it in the kernel {worker_sys * 1e3 / count:.3f}), "
        f"server {server_cpu * 1e3 / count:.3f} ms; busy over the drain: worker "
        f"{worker_cpu / wall:.0%}, server {server_cpu / wall:.0%}; load {os.getloadavg()[0]:.1f}"
    )
    print(f"\nthe worker's backends, mean count over {reads} reads:")
    for row, times in seen.most_common(10):
        print(f"  {times / max(reads, 1):5.2f}  {' | '.join(row)}")
    if spy and samples.exists():
        print("\npy-spy, the event loop holding the GIL (inclusive share of samples):")
        for name, share in heaviest(samples.read_text(), 40):
            print(f"  {share:6.1%}  {name}")
    if phases and recorded.exists():
        drain_phases.report(recorded.read_text(), concurrency)


async def start_sampler(spy: str, pid: int, samples: Path) -> asyncio.subprocess.Process:
    """py-spy sampling `pid` where its event loop holds the GIL, into `samples`."""
    command = [spy, "record", "-r", "200", "-f", "raw", "-o", str(samples)]
    command += ["--gil", "--nonblocking", "--pid", str(pid)]
    return await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL)


def worker_env(tree: str, phases: Path | None) -> dict[str, str]:
    """The worker runs `tree`; with `phases`, recording its generations there."""
    if phases is None:
        return {"PYTHONPATH": os.pathsep.join([str(jobs.BENCH), tree])}
    path = os.pathsep.join([str(jobs.BENCH / "drain_phases"), str(jobs.BENCH), tree])
    return {"PYTHONPATH": path, "NOETA_BENCH_PHASES": str(phases)}


def system_seconds(pid: int) -> float:
    """The system (kernel) part of a process's CPU (Linux /proc): its socket sends."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def heaviest(raw: str, count: int) -> list[tuple[str, float]]:
    """The functions in most of py-spy's raw samples (each counted once a sample)."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, number = line.rpartition(" ")
        if not number.isdigit():
            continue
        total += int(number)
        names = {frame.rsplit(":", 1)[0] + ")" for frame in stack.split(";")}
        inclusive.update(dict.fromkeys(names, int(number)))
    # Less the frames every sample of the loop has (the entry point, the loop's own).
    ranked = inclusive.most_common(count + 30)
    top = ranked[0][1] if ranked else 0
    return [(name, n / total) for name, n in ranked if n < 0.98 * top][:count]


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--tree", required=True, help="the checkout whose worker runs")
    arguments.add_argument("--jobs", type=int, default=10_000)
    arguments.add_argument("--concurrency", type=int, default=jobs.CONCURRENCY)
    arguments.add_argument("--py-spy", dest="spy", help="py-spy's path (none: no profile)")
    arguments.add_argument(
        "--function",
        choices=sorted(noop_job.FUNCTIONS),
        default="noop",
        help="the no-op drained: noop (sync: run in a thread) or noop_async (the peers' kind)",
    )
    arguments.add_argument("--agent", action="store_true", help="one-shot agent tasks, not jobs")
    arguments.add_argument(
        "--phases", action="store_true", help="with --agent: where a generation's time goes"
    )
    arguments.add_argument("--dsn")
    options = arguments.parse_args()
    with server(options.dsn) as dsn:
        tree, count, spy = options.tree, options.jobs, options.spy
        asyncio.run(
            profile(
                dsn,
                tree,
                count,
                options.concurrency,
                spy,
                options.function,
                options.agent,
                options.phases,
            )
        )


if __name__ == "__main__":
    main()
