"""A `noeta.Client` a script forgets to close (the Celery habit) exits quietly: no
"Task was destroyed but it is pending!", exit code 0, and no server connection left."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from tests.worker.conftest import until

REPOSITORY = Path(__file__).parents[2]
NAME = "noeta-unclosed-test"

SCRIPT = """
import sys
import noeta

client = noeta.Client(sys.argv[1], application_name=sys.argv[2])
{action}
print("ok")
"""


async def connections_of(url: str, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(
    "action",
    [
        "client.submit('hello', model='scripted:none', tools=[])",
        "client.tasks(limit=1)",
        "",  # made, never used
    ],
)
async def test_a_client_left_open_exits_quietly_and_leaves_no_connection(
    postgres_url: str, tmp_path: Path, action: str
) -> None:
    await (await open_store(postgres_url, migrate=True)).close()
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(action=action))
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script), postgres_url, NAME],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "ok\n")

    async def none_left() -> bool:
        return await connections_of(postgres_url, NAME) == 0

    await until(none_left, "the server has no connection of the exited script")
