"""Warm-up: call a bound model's callables with the requests of ``ModelConfig(model_warmup=...)`` before the
model loads, as PyTriton 0.7 does (in this process, not through Triton). A failing warm-up is logged and
the model loads anyway.

Example::

    warm_up(model)  # before its first load: each callable gets each warm-up request once
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import Any

from tritonrt.model_config.warmup import generate_warmup_requests
from tritonrt.models.bound import BoundModel
from tritonrt.proxy.types import Request

__all__ = ["warm_up"]

LOGGER = logging.getLogger("tritonrt")


def warm_up(model: BoundModel, only: int | None = None) -> None:
    """Call each of ``model``'s callables (``only``: that instance's) once per warm-up request (none configured:
    nothing happens). A worker process warms its own callable up, after its setup."""
    if not model.warmup:
        return
    try:
        requests = generate_warmup_requests(model.warmup)
    except Exception as error:  # bad WarmupInput or data file: the model loads without warm-up
        LOGGER.warning("Warm-up of model %r skipped: %s", model.name, error)
        return
    known = {spec.name for spec in model.config.inputs}
    unknown = sorted({name for request in requests for name in request} - known)
    if unknown:
        LOGGER.warning("Warm-up of model %r sends inputs the model does not have: %s", model.name, ", ".join(unknown))
    LOGGER.info("Warming up model %r: %d request(s) per callable", model.name, len(requests))
    for index, infer_callable in enumerate(model.callables):
        if only is not None and index != only:
            continue
        for number, data in enumerate(requests, start=1):
            try:
                _finish(infer_callable([Request(dict(data))]))
            except Exception as error:
                LOGGER.warning(
                    "Warm-up request %d/%d of model %r (callable %d) failed: %s: %s",
                    number,
                    len(requests),
                    model.name,
                    index,
                    type(error).__name__,
                    error,
                )
    LOGGER.info("Warm-up of model %r done", model.name)


def _finish(result: Any) -> None:
    """Run the call to its end: await a coroutine, exhaust a stream (sync or async)."""
    if inspect.isawaitable(result) or inspect.isasyncgen(result):
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # the usual case: no event loop in this thread
            asyncio.run(_drain(result))
            return
        failures: list[BaseException] = []  # bind() called inside an event loop (e.g. a notebook): use a thread
        thread = threading.Thread(target=_run_collecting, args=(result, failures), name="tritonrt-warmup")
        thread.start()
        thread.join()
        if failures:
            raise failures[0]
    elif inspect.isgenerator(result):
        for _ in result:
            pass


def _run_collecting(result: Any, failures: list[BaseException]) -> None:
    try:
        asyncio.run(_drain(result))
    except BaseException as error:
        failures.append(error)


async def _drain(result: Any) -> None:
    if inspect.isasyncgen(result):
        async for _ in result:
            pass
    else:
        await result
