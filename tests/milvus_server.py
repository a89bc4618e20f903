"""A real Milvus standalone server for the test session, started the way the PostgreSQL is used: one per session.

The ``milvus`` package (test extra) ships the Go ``milvus`` binary with its embedded etcd and local storage;
``milvus-server --data DIR --proxy-port PORT`` runs it. Its Python wrapper does not stop the binary when only the
wrapper is killed, and the binary can take longer than 20 s to honour SIGTERM: the server runs in its own process
group, which is stopped as a whole (SIGTERM, then SIGKILL after a grace period). Its embedded etcd listens on the
fixed ports 2379/2380 unless given a config file: each server gets free ones, so two can run on one machine (another
test session, a developer's own). A machine where the binary cannot start skips the tests that need it, saying why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import console_script, free_port

FATAL = ("panic: ", "[FATAL]")
READY_TIMEOUT_S = 120  # the first start unpacks ~100 MB of binaries; later ones take ~10 s on 2 cores
STOP_GRACE_S = 5  # the data dir is thrown away: no flush is worth waiting for


class MilvusServer:
    """One ``milvus-server`` process group on a loopback port and a data dir; restartable on both."""

    def __init__(self, data: Path) -> None:
        self.data, self.port = data, free_port()
        self.etcd_client, self.etcd_peer = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.data / "server.log"

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start and wait until a client can list collections; ``RuntimeError`` (with the log's tail) if not."""
        self.data.mkdir(parents=True, exist_ok=True)
        etcd = self.data / "embedEtcd.yaml"
        client, peer = f"http://127.0.0.1:{self.etcd_client}", f"http://127.0.0.1:{self.etcd_peer}"
        etcd.write_text(
            f"listen-client-urls: {client}\nadvertise-client-urls: {client}\nlisten-peer-urls: {peer}\n"
            f"initial-advertise-peer-urls: {peer}\ninitial-cluster: default={peer}\n"
        )
        command = [console_script("milvus-server"), "--data", str(self.data), "--proxy-port", str(self.port)]
        command += ["--etcd-port", str(self.etcd_client)]
        env = {**os.environ, "ETCD_CONFIG_PATH": str(etcd)}  # Milvus reads etcd.config.path from the environment
        with self.log.open("ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not self.ready():
            # a binary that dies leaves the wrapper waiting forever: its last words in the logs end the wait
            failed = self.process.poll() is not None or any(mark in self.tail(20000) for mark in FATAL)
            if failed or time.monotonic() > deadline:
                state = "failed" if failed else f"not ready in {timeout:.0f} s"
                self.stop()
                raise RuntimeError(f"milvus-server {state}: {self.tail()}")
            time.sleep(0.5)

    def ready(self) -> bool:
        from pymilvus import MilvusClient  # the test extra's client; imported where a server is wanted

        try:
            client = MilvusClient(uri=self.uri, timeout=3, dedicated=True)  # never the shared connection of a store
        except Exception:  # refused or not serving yet: pymilvus raises several types
            return False
        try:
            client.list_collections(timeout=3)
            return True
        except Exception:
            return False
        finally:
            client.close()

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop the whole process group: the wrapper alone would leave the binary running."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(self.process.pid):
            self.process.poll()  # reap the wrapper so that only the binary can keep the group alive
            time.sleep(0.2)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        self.process = None

    def restart(self, tries: int = 3, timeout: float = 45) -> None:
        """Start again on the same port and data dir after :meth:`kill`. A v2.3.5 standalone killed while a client
        was connected never came up on its first restart here (its query node never registered; 0 of 6 tries), and
        did when stopped and started again, in ~8 s; one whose clients had closed came up at once (3 of 3)."""
        for attempt in range(tries):
            try:
                self.start(timeout=timeout)
                return
            except RuntimeError:  # start() stopped it already
                if attempt == tries - 1:
                    raise

    def kill(self) -> None:
        """The server dies at once (SIGKILL to its process group), as in a crash: nothing is shut down in order."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        deadline = time.monotonic() + 10  # the binary, reparented, is reaped by init
        while _group_alive(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.process = None

    def tail(self, chars: int = 2000) -> str:
        """The end of the wrapper's output and the binary's error lines."""
        parts = [self.log, self.data / "logs" / "milvus-stderr.log", self.data / "logs" / "milvus-stdout.log"]
        text = "\n".join(p.read_text("utf-8", "replace")[-chars:] for p in parts if p.exists())
        errors = [line[:400] for line in text.splitlines() if "[ERROR]" in line or "[FATAL]" in line or "panic" in line]
        return "\n".join(errors[-5:]) or text[-chars:] or "(no output)"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _started(server: MilvusServer) -> MilvusServer:
    """``server`` started, or the test skipped with why (no binary, or it cannot start here)."""
    try:
        console_script("milvus-server")
    except FileNotFoundError as exc:
        pytest.skip(f"no Milvus server for these tests: {exc} (pip install 'milvus==2.3.5', in the test extra)")
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"the Milvus server cannot start on this machine: {exc}")
    return server


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """A Milvus standalone server for this session on a free port and a temporary data dir."""
    server = _started(MilvusServer(tmp_path_factory.mktemp("milvus-server")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def milvus_restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """A server of the test's own, which the test may stop and start again (same port, same data dir)."""
    server = _started(MilvusServer(tmp_path_factory.mktemp("milvus-restartable")))
    try:
        yield server
    finally:
        server.stop()
