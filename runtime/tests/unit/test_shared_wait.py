"""SharedWait and AsyncSharedWait: one run at a time, its outcome shared by the callers that joined it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tritonrt.client._shared_wait import AsyncSharedWait, SharedWait

CALLERS = 8


class NotReady(Exception):
    pass


def _leader_then_joiners(shared: SharedWait[int], fail: bool) -> tuple[list[object], int]:
    """One thread starts a run that blocks; CALLERS - 1 more call meanwhile; then the run ends.

    Returns each caller's outcome (result or error) and how many times the function ran.
    """
    calls: list[int] = []
    started, release = threading.Event(), threading.Event()

    def function() -> int:
        calls.append(1)
        started.set()
        release.wait()
        if fail:
            raise NotReady("server at http://x:1 was not live within 2 s")
        return 42

    outcomes: list[object] = [None] * CALLERS

    def one(index: int) -> None:
        try:
            outcomes[index] = shared.run(function)
        except NotReady as error:
            outcomes[index] = error

    threads = [threading.Thread(target=one, args=(index,)) for index in range(CALLERS)]
    threads[0].start()
    started.wait()
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.5)  # lets the joiners reach run(); one that came later would run again and show in the count
    release.set()
    for thread in threads:
        thread.join()
    return outcomes, len(calls)


def test_concurrent_callers_share_one_failed_run():
    outcomes, calls = _leader_then_joiners(SharedWait(), fail=True)
    assert calls == 1
    assert all(isinstance(outcome, NotReady) for outcome in outcomes)
    assert {str(outcome) for outcome in outcomes} == {"server at http://x:1 was not live within 2 s"}
    assert len({id(outcome) for outcome in outcomes}) == CALLERS, "each joined caller raises its own copy"


def test_joined_callers_get_the_result_without_running():
    outcomes, calls = _leader_then_joiners(SharedWait(), fail=False)
    assert (outcomes, calls) == ([42] * CALLERS, 1)


def test_the_next_call_after_a_failure_runs_again():
    shared: SharedWait[int] = SharedWait()
    attempts = iter([NotReady("not yet"), 7])

    def function() -> int:
        outcome = next(attempts)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with pytest.raises(NotReady):
        shared.run(function)
    assert shared.run(function) == 7


async def test_async_callers_share_one_run():
    shared: AsyncSharedWait[int] = AsyncSharedWait()
    calls: list[int] = []

    async def function() -> int:
        calls.append(1)
        await asyncio.sleep(0.05)
        raise NotReady("not ready within 2 s")

    outcomes = await asyncio.gather(*(shared.run(function) for _ in range(CALLERS)), return_exceptions=True)
    assert calls == [1]
    assert all(isinstance(outcome, NotReady) for outcome in outcomes)
    with pytest.raises(NotReady):  # a later call runs again
        await shared.run(function)
    assert calls == [1, 1]


async def test_async_cancelled_caller_does_not_cancel_the_run():
    shared: AsyncSharedWait[int] = AsyncSharedWait()

    async def function() -> int:
        await asyncio.sleep(0.1)
        return 5

    first = asyncio.ensure_future(shared.run(function))
    second = asyncio.ensure_future(shared.run(function))
    await asyncio.sleep(0.01)
    first.cancel()
    assert await second == 5
    assert first.cancelled()


async def test_async_cancel_stops_the_run():
    shared: AsyncSharedWait[int] = AsyncSharedWait()
    waiting = asyncio.ensure_future(shared.run(lambda: asyncio.sleep(60, result=1)))
    await asyncio.sleep(0.01)
    shared.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


def test_a_joined_caller_runs_again_when_the_leader_was_interrupted():
    shared: SharedWait[int] = SharedWait()
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def interrupted() -> int:
        calls.append("leader")
        started.set()
        release.wait()
        raise KeyboardInterrupt

    def ready() -> int:
        calls.append("joined")
        return 3

    outcomes: list[object] = []

    def leader() -> None:
        try:
            shared.run(interrupted)
        except KeyboardInterrupt as error:
            outcomes.append(error)

    first = threading.Thread(target=leader)
    first.start()
    started.wait()
    second = threading.Thread(target=lambda: outcomes.append(shared.run(ready)))
    second.start()
    time.sleep(0.3)
    release.set()
    first.join()
    second.join()
    assert calls == ["leader", "joined"]
    assert sorted(map(type, outcomes), key=str) == sorted([KeyboardInterrupt, int], key=str)
