"""``kbseek serve``: the REST API, the MCP endpoint and the metrics on one port.

The server owns its data home (``kbseek.maintenance.home``) from start to exit: a second server on the same home, or a
writing CLI command, refuses and names it; reading commands run beside it. SIGTERM and Ctrl-C stop it cleanly and
it exits 0, so ``make run`` and process supervisors see a normal stop rather than a death by signal.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from kbseek.errors import NotFoundError
from kbseek.interfaces.cli.common import err, exit_on_error, load_settings
from kbseek.maintenance.home import serving


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
        lock = serving(settings, f"http://{shown}:{port}" if port else None)
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
