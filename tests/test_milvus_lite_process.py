"""Milvus Lite as one process sees it: a data dir another process holds is a one-line error (no traceback, no
silent fallback), a failed open lets go of the data dir, and the client does not ping the in-process server
(pings on an idle channel made it answer GOAWAY too_many_pings, which gRPC logged as an error)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from kbseek.adapters.vectors_milvus import MilvusVectorStore
from kbseek.errors import StorageError

HOLD = (
    "import sys, time; from pymilvus import MilvusClient; MilvusClient(sys.argv[1]).list_collections(); "
    "print('held', flush=True); time.sleep(600)"
)
IDLE = """
import sys, time
import numpy as np
from kbseek.adapters.vectors_milvus import MilvusVectorStore
from kbseek.ports import VectorRecord
store = MilvusVectorStore(uri=sys.argv[1], dim=4, model_id="keepalive")
store.upsert([VectorRecord("a" * 16, np.full(4, 0.5, dtype=np.float32), "d", "c", "p", "f", 0, 1, "t", "b")])
print("idle from here", file=sys.stderr, flush=True)
time.sleep(12)  # pymilvus's keepalive is 10 s: an idle channel would ping once by now
store.close()
"""


def test_a_data_dir_held_by_another_process_is_a_one_line_error(tmp_path, caplog):
    uri = str(tmp_path / "milvus.db")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, uri], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with caplog.at_level(logging.DEBUG), pytest.raises(StorageError) as raised:
            MilvusVectorStore(uri=uri, dim=4, model_id="m")
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert (
        raised.value.message == f"Milvus Lite at {uri} is locked by another process (Milvus Lite serves one "
        "process per data dir)"
    )
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # Milvus Lite's 22-line traceback is gone


def test_a_failed_open_lets_go_of_the_data_dir(tmp_path):
    uri = str(tmp_path / "milvus.db")
    with pytest.raises(StorageError, match="has no collection"):
        MilvusVectorStore(uri=uri, dim=4, model_id="m", create=False)  # a check never creates one
    opened = subprocess.run(
        [sys.executable, "-c", HOLD.replace("time.sleep(600)", "pass"), uri],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert opened.returncode == 0 and opened.stdout.strip() == "held", opened.stderr[-2000:]


def test_the_client_does_not_ping_the_in_process_server(tmp_path):
    env = {**os.environ, "GRPC_VERBOSITY": "debug", "GRPC_TRACE": "http_keepalive"}
    run = subprocess.run(
        [sys.executable, "-c", IDLE, str(tmp_path / "milvus.db")], env=env, capture_output=True, timeout=180
    )
    stderr = run.stderr.decode("utf-8", "replace")
    assert run.returncode == 0, stderr[-3000:]
    idle = stderr.split("idle from here", 1)[1]
    pings = [line for line in idle.splitlines() if "keepalive ping" in line and "cancelled" not in line]
    assert pings == [], pings
