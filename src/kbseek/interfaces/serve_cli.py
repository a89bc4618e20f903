"""``kbseek serve``: the REST API, the MCP endpoint and the metrics on one port."""

from __future__ import annotations

from typing import Annotated

import typer

from kbseek.interfaces.cli import _settings, app, err


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes it beyond this machine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8000,
    workers_threads: Annotated[int, typer.Option("--threads", min=1, max=256,
                                                 help="Request threads (lookups run in parallel).")] = 40,
) -> None:
    """Serve the knowledge base: REST API (/docs), MCP (/mcp), /health, /ready and /metrics."""
    import anyio.to_thread
    import uvicorn

    from kbseek.interfaces.api import create_app

    settings = _settings()
    application = create_app(settings, bind_host=host)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    base = f"http://{shown}:{port}"
    err.print(f"kbseek serving {settings.home} on {base}\n  API docs: {base}/docs\n  MCP:      {base}/mcp "
              f"(streamable HTTP)\n  ready:    {base}/ready   metrics: {base}/metrics"
              + f"\n  {application.state.runtime.keys.describe_writes()}",
              highlight=False)

    async def limit_threads() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = workers_threads

    config = uvicorn.Config(application, host=host, port=port, log_level=settings.log_level.lower(),
                            access_log=False, timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    import asyncio

    async def main() -> None:
        await limit_threads()
        await server.serve()

    asyncio.run(main())
