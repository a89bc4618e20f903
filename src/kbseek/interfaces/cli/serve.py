"""``kbseek serve``: the REST API, the MCP endpoint and the metrics on one port.

The server owns its data home (``kbseek.maintenance.home``) from start to exit: a second server on the same home, or a
writing CLI command, refuses and names it; reading commands run beside it. SIGTERM and Ctrl-C stop it cleanly and
it exits 0, so ``make run`` and process supervisors see a normal stop rather than a death by signal.

``--workers N`` runs N worker processes on one port (uvicorn's supervisor: it binds the socket once, the kernel
hands each connection to one worker, and a worker that dies is replaced). The supervisor owns the home and migrates
the schema before any worker starts; the workers write it on its behalf. Only where every worker sees the same
state: a PostgreSQL database and a Milvus server (``workers_refusal`` says why anything else is refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kbseek.errors import ConfigError, NotFoundError
from kbseek.interfaces.cli.common import err, exit_on_error, load_settings
from kbseek.maintenance.home import WORKER_OF, serving, workers_refusal

if TYPE_CHECKING:
    from kbseek.settings import Settings

BIND_HOST = "KBSEEK_SERVE_BIND_HOST"  # the --host a worker answers to, from its supervisor
THREADS = "KBSEEK_SERVE_THREADS"  # its --threads


def serve(
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes it beyond this machine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8000,
    workers_threads: Annotated[
        int, typer.Option("--threads", min=1, max=256, help="Request threads (lookups run in parallel).")
    ] = 40,
    watch: Annotated[
        list[Path] | None,
        typer.Option(metavar="DIR", help="Also watch this folder (repeatable; adds to watch_dirs)."),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1, max=64, help="Worker processes on the one port (more than 1: PostgreSQL and a Milvus server only)."
        ),
    ] = 1,
) -> None:
    """Serve the knowledge base: REST API (/docs), MCP (/mcp), /health, /ready and /metrics."""
    # Imported here: the web stack loads only for the server (start-up cost, see common)
    import anyio.to_thread

    # the web stack loads only for the command that serves it
    import uvicorn

    from kbseek.interfaces.http.app import create_app

    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    with exit_on_error(False):
        settings = load_settings()
        if watch:
            settings = settings.model_copy(update={"watch_dirs": [*settings.watch_dirs, *watch]})
        for folder in settings.watch_dirs:
            if not folder.is_dir():
                raise NotFoundError(f"cannot watch {folder}: no such folder", hint="--watch takes a folder")
        refused = workers_refusal(settings, workers)
        if refused:
            raise ConfigError(refused)
        lock = serving(settings, f"http://{shown}:{port}" if port else None)
    if workers > 1:
        try:
            serve_workers(settings, host, shown, port, workers, workers_threads, lock)
        finally:
            lock.release()
        return
    try:
        application = create_app(settings, bind_host=host)
        config = uvicorn.Config(
            application,
            host=host,
            port=port,
            log_level=settings.log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=10,
        )
        server = uvicorn.Server(config)

        def stop(_signum: int, _frame: Any) -> None:
            # uvicorn puts its own handler in place while it serves and, once it has shut down, raises the signal
            # again for the handler it found: this one, so the process ends normally instead of dying of it
            server.should_exit = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)

        async def main() -> None:
            anyio.to_thread.current_default_thread_limiter().total_tokens = workers_threads
            serving = asyncio.ensure_future(server.serve())
            while not server.started and not serving.done():
                await asyncio.sleep(0.05)
            if server.started:
                bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
                base = f"http://{shown}:{bound}"
                lock.set_url(base)
                err.print(
                    f"kbseek serving {settings.home} on {base}\n  API docs: {base}/docs\n  MCP:      {base}/mcp "
                    f"(streamable HTTP)\n  ready:    {base}/ready   metrics: {base}/metrics"
                    + f"\n  {application.state.runtime.keys.describe_writes()}"
                    + "".join(f"\n  watching: {folder}" for folder in settings.watch_dirs)
                    + "".join(f"\n  git source: {s.name} (POST {base}/api/sync/git)" for s in settings.git_sources),
                    highlight=False,
                )
            await serving

        asyncio.run(main())
    finally:
        lock.release()


def serve_workers(settings: Settings, host: str, shown: str, port: int, workers: int, threads: int, lock: Any) -> None:
    """Run ``workers`` processes of :func:`worker_app` on one socket until SIGTERM or Ctrl-C."""
    # the web stack and the schema tools load only for the command that serves
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from kbseek.maintenance.schema import upgrade  # the migration stack: only for this command

    with exit_on_error(False):
        upgrade(settings)  # once, before the workers: two first starts would race on an empty database
    os.environ.update(  # what a worker needs to open the same home as this process (spawned: it inherits these)
        {
            "KBSEEK_HOME": str(settings.home),
            "KBSEEK_LOG_LEVEL": settings.log_level,
            "KBSEEK_LOG_FORMAT": settings.log_format,
            WORKER_OF: str(os.getpid()),
            BIND_HOST: host,
            THREADS: str(threads),
        }
    )
    config = uvicorn.Config(
        "kbseek.interfaces.cli.serve:worker_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    sock = config.bind_socket()
    base = f"http://{shown}:{sock.getsockname()[1]}"
    lock.set_url(base)
    err.print(
        f"kbseek serving {settings.home} on {base} with {workers} worker processes\n  API docs: {base}/docs\n"
        f"  MCP:      {base}/mcp (streamable HTTP)\n  ready:    {base}/ready   metrics: {base}/metrics (per worker)",
        highlight=False,
    )
    Multiprocess(config, sockets=[sock]).run()  # SIGTERM / Ctrl-C: the workers stop gracefully, then this returns


def worker_app() -> Any:
    """The app of one ``--workers`` process, from the settings its supervisor left in the environment; every
    response says which worker answered (``X-Kbseek-Worker: <pid>``, to match it with that worker's log)."""
    # imported in the worker process only: the supervisor never loads the web stack or the model
    import anyio.to_thread

    from kbseek.interfaces.http.app import create_app  # the web stack: in the worker only
    from kbseek.settings import Settings  # (the supervisor's copy is not passed: the environment is)

    application = create_app(Settings(), bind_host=os.environ.get(BIND_HOST))
    inner = application.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = int(os.environ.get(THREADS, "40"))
        async with inner(app) as state:
            yield state

    application.router.lifespan_context = lifespan
    header = (b"x-kbseek-worker", str(os.getpid()).encode())

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async def send_with_worker(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await application(scope, receive, send_with_worker if scope["type"] == "http" else send)

    return app
