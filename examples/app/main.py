"""An example web application on noeta (docs/api.md): each request to /ask submits an
agent task and awaits its answer through `AsyncClient`; /thumbnails enqueues a plain job.

    pip install 'noeta[web]'
    noeta worker --config examples/app/noeta.yaml &          # from the repository's root
    uvicorn examples.app.main:app
    curl -d '{"question": "What is noeta?"}' localhost:8000/ask
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import noeta
from examples import jobs

assert jobs  # imported: its functions are the jobs this app can enqueue

ANSWER_WITHIN_SECONDS = 120.0


def create_app(store: str | None = None, model: str | None = None) -> Starlette:
    """The app on `store` (default: NOETA_STORE, else the embedded PostgreSQL)."""
    client = noeta.AsyncClient(store)
    model = model or os.environ.get("NOETA_MODEL", "anthropic:claude-sonnet-4-5")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with client:
            yield

    async def ask(request: Request) -> JSONResponse:
        body = await request.json()
        question = body.get("question") if isinstance(body, dict) else None
        if not isinstance(question, str) or not question.strip():
            return JSONResponse({"error": 'send {"question": "…"}'}, status_code=400)
        task = await client.submit(question, model=model, tools=[])
        try:
            answer = await client.result(task, timeout=ANSWER_WITHIN_SECONDS)
        except noeta.TaskFailed as failed:
            return JSONResponse({"task": task.id, "error": failed.error}, status_code=502)
        except noeta.ResultTimeout:
            return JSONResponse({"task": task.id, "status": "still running"}, status_code=202)
        return JSONResponse({"task": task.id, "answer": answer})

    async def thumbnail(request: Request) -> JSONResponse:
        body = await request.json()
        try:
            task = await client.enqueue("make_thumbnail", body if isinstance(body, dict) else {})
        except noeta.NoetaError as refused:  # bad input: nothing was enqueued
            return JSONResponse({"error": str(refused)}, status_code=400)
        return JSONResponse({"task": task.id}, status_code=202)

    async def task_status(request: Request) -> JSONResponse:
        task_id = request.path_params["task_id"]
        try:
            record = await client.get(task_id)
        except noeta.UnknownTask:
            return JSONResponse({"error": f"no task {task_id}"}, status_code=404)
        document: dict[str, object] = {"task": task_id, "status": record.status.value}
        if record.status == "done":
            document["result"] = await client.result(task_id, timeout=1)
        return JSONResponse(document)

    routes = [
        Route("/ask", ask, methods=["POST"]),
        Route("/thumbnails", thumbnail, methods=["POST"]),
        Route("/tasks/{task_id}", task_status),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


app = create_app()
