"""A real ``kbseek serve`` process on a free loopback port, for the tests that need one."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def console_script(name: str = "kbseek") -> str:
    """The console script ``name`` of the interpreter running the tests, wherever its environment lives (never a
    path inside the checkout such as ``.venv/bin``): the suite must start the kbseek it imports, from any venv and
    any working directory."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        if (Path(folder) / name).is_file():
            return str(Path(folder) / name)
    raise FileNotFoundError(
        f"no {name!r} script next to {sys.executable}: install the project into this environment (pip install -e .)"
    )


KBSEEK = console_script()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    env: dict[str, str], log_path: Path, *, timeout: float = 90, args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, str]:
    """Start ``kbseek serve`` (with ``args``) and wait until ``/ready`` says 200; the log (appended) explains a
    failure."""
    port = free_port()
    with log_path.open("ab") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [KBSEEK, "-v", "serve", "--port", str(port), *args], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(
                "kbseek serve did not become ready:\n" + log_path.read_text("utf-8", "replace")[-3000:]
            )
        time.sleep(0.05)


@contextlib.contextmanager
def running_server(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """A server for the block; stopped (SIGTERM, then waited for) afterwards."""
    process, base = start_server(env, log_path)
    try:
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)
