"""The README's quickstart, run as a new user runs it: every command in order, through the real CLI, on a fresh home.

``QUICKSTART`` and ``SERVE`` are the README's two quickstart blocks, verbatim (the README prefaces them with
``source .venv/bin/activate``, which puts ``kbseek`` on the PATH). The one-shot block runs as one ``bash -e``
script, so a failing command fails the test and the trace names it. The lexical stack (``KBSEEK_EMBEDDER=none``)
keeps it fast; no command of the block needs the embedder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from serving import free_port
from support import ROOT

QUICKSTART = """\
export KBSEEK_HOME="$(mktemp -d)"                          # a fresh data home (make run serves ./.kbseek)
kbseek ingest examples/knowledge_base                      # folder ingest: ids are paths relative to the folder
kbseek docs list --category troubleshoot
kbseek docs show troubleshoot/fault-diagnosis-process.md   # metadata, warnings, chunks + breadcrumbs
kbseek docs lint                                           # keywords several documents share
kbseek db upgrade && kbseek db current
kbseek search "HighCPUUsage 告警" --top-k 5                 # ranked chunks, breadcrumbs, scores
kbseek search "df -h inode 耗尽" --policy lexical           # one lane alone: lexical | dense | hybrid
kbseek lookup "ERR_TIMEOUT 支付超时" --explain               # lookup_knowledge: levelled evidence + how it was reached
kbseek lookup "[FIRING:1] HighCPUUsage (payment-gateway-7d9f8b6c5-x2k4p critical) instance=10.0.3.17:9100"  # a pasted alert
kbseek lookup "x" --section "api/payment-errors.md#err_timeout"  # one section, by anchor or heading path
kbseek lookup "jmap 内存泄漏" --session diag-1 --format json     # a session: evidence given before comes back DEDUPED
kbseek lookup "排查步骤" --filter severity=P1 --filter tags=jvm --expand neighbors
kbseek trace diag-1 && kbseek verify-summary diag-1        # what a session asked and got
kbseek invocations list --since 24h --level NO_CONFIDENT_MATCH   # recorded calls; prune --older-than 30d
kbseek audit --since 7d && kbseek metrics --since 24h      # who changed what; Prometheus metrics
kbseek tool-schema                                         # the OpenAI function-calling schema of lookup_knowledge
kbseek docs delete api/payment-errors.md
kbseek ingest examples/knowledge_base --prune --json       # sync the folder (the deleted file comes back); --json for machines
kbseek doctor --fix && kbseek backup "$KBSEEK_HOME.tar.gz"  # drift check and repair; online backup
kbseek eval run examples/eval/golden-cases.json --split dev --policy hybrid --policy lexical  # with 95% CIs
"""  # noqa: E501 - verbatim from the README

SERVE = """\
kbseek serve --port 8000                                   # REST API, /mcp, /metrics and the web console at /
kbseek mcp                                                 # MCP over stdio, for an agent's MCP client
"""


def user_env(tmp_path: Path) -> dict[str, str]:
    """A new user's shell: the venv's ``kbseek`` first on the PATH, temp files and caches inside ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBSEEK_")}
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "TMPDIR": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "KBSEEK_EMBEDDER": "none",
        "COLUMNS": "200",
    }
    return env


def test_the_quickstart_runs_in_order_on_a_fresh_home(tmp_path):
    script = "set -euo pipefail\nset -x\n" + QUICKSTART
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=user_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    output = done.stdout  # the trace (+ command) and each command's output, in order
    assert done.returncode == 0, output[-6000:]
    homes = [p for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith("tmp.")]
    assert len(homes) == 1 and (homes[0] / "kbseek.db").exists()  # the home the block made, and only it
    assert Path(f"{homes[0]}.tar.gz").stat().st_size > 0  # the backup
    assert "troubleshoot/high-cpu.md" in output and "ERR_TIMEOUT" in output
    assert "added" in output.split("kbseek ingest examples/knowledge_base --prune --json")[-1]  # it came back


def test_the_serve_block_starts_both_servers(tmp_path):
    env = user_env(tmp_path)
    home = tmp_path / "home"
    env["KBSEEK_HOME"] = str(home)
    subprocess.run(
        ["kbseek", "ingest", "examples/knowledge_base"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300
    )
    serve, mcp = (line.split("#")[0].split() for line in SERVE.splitlines())
    port = str(free_port())  # 8000 may be taken on a test machine
    server = subprocess.Popen(
        [*serve[:-1], port], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert _wait_ready(f"http://127.0.0.1:{port}", server)
    finally:
        server.terminate()
        server.wait(timeout=30)
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "quickstart-test", "version": "1"},
        },
    }
    answered = subprocess.run(
        mcp, cwd=ROOT, env=env, input=json.dumps(hello) + "\n", capture_output=True, text=True, timeout=120
    )
    reply = json.loads(answered.stdout.splitlines()[0])
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"], answered.stderr[-3000:]


def _wait_ready(base: str, process: subprocess.Popen, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


def test_the_readme_shows_exactly_the_blocks_this_suite_runs():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert f"```bash\n{QUICKSTART}```" in readme
    assert f"```bash\n{SERVE}```" in readme
