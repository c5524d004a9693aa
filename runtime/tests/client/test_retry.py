"""Which failed requests the clients send again (tritonrt.client._retry), and the replaceable protocol clients
that give the second try its new connection (tritonrt.client._slots). What the retry does against real servers:
tests/integration/test_drain_retry.py."""

import asyncio
import errno
import logging

import numpy as np
import pytest

from tritonrt.client._retry import RetryCount, may_send_again, refused_unrun
from tritonrt.client._slots import AsyncClientSlot, ClientSlot
from tritonrt.client._transport import InferRequest, TritonUrl, server_error, timeout_error, unreachable_error
from tritonrt.client.exceptions import PyTritonClientValueError

URL = TritonUrl.from_url("grpc://server:8001")


def _error(message: str, status: str):
    return server_error(message, status, url=URL, action="Inference", model="m")


REFUSED_UNRUN = {
    "the drain's unload": _error("Request for unknown model: 'm' has no available versions", "StatusCode.NOT_FOUND"),
    "the drain's unload over HTTP": _error("Request for unknown model: 'm' has no available versions", "400"),
    "gRPC UNAVAILABLE": _error("Broken pipe", "StatusCode.UNAVAILABLE"),
    "gRPC socket closed": _error("Socket closed", "StatusCode.UNAVAILABLE"),
    "a stopping server": _error("Server is stopping", "503"),
    "a reset connection": unreachable_error(URL, ConnectionResetError(errno.ECONNRESET, "reset")),
    "a refused connection": unreachable_error(URL, ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
}
NOT_SENT_AGAIN = {
    "the callable's error": _error("x must not be negative", "StatusCode.INTERNAL"),
    "a bad input": _error("unexpected shape for input 'x'", "StatusCode.INVALID_ARGUMENT"),
    "a bad input over HTTP": _error("unexpected shape for input 'x'", "400"),
    "a timeout": timeout_error(URL, "Inference", 1.0),
    "a deadline": _error("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED"),
    "a missing access token": _error("This API is restricted, expecting header 'x'", "StatusCode.UNAVAILABLE"),
    "the client's own check": PyTritonClientValueError("bad"),
}


@pytest.mark.parametrize("error", REFUSED_UNRUN.values(), ids=REFUSED_UNRUN.keys())
def test_a_refusal_of_a_stopping_server_is_sent_again(error):
    assert refused_unrun(error)
    assert may_send_again(error, None)
    assert may_send_again(error, {"priority": 1})


@pytest.mark.parametrize("error", NOT_SENT_AGAIN.values(), ids=NOT_SENT_AGAIN.keys())
def test_other_failures_are_not_sent_again(error):
    assert not may_send_again(error, None)


@pytest.mark.parametrize("parameter", ["sequence_id", "sequence_start", "sequence_end"])
def test_a_sequence_request_is_not_sent_again(parameter):
    assert not may_send_again(REFUSED_UNRUN["the drain's unload"], {parameter: 1})


def test_each_retry_is_counted_and_logged(caplog):
    caplog.set_level(logging.DEBUG, logger="tritonrt.client")
    count = RetryCount()
    request = InferRequest("m", None, {"x": np.zeros(1, np.float32)}, ["y"], parameters=None, headers={})
    assert count.send_again(request, REFUSED_UNRUN["gRPC UNAVAILABLE"], URL.with_scheme)
    assert not count.send_again(request, NOT_SENT_AGAIN["a bad input"], URL.with_scheme)
    assert count.value == 1
    (record,) = [record for record in caplog.records if record.name == "tritonrt.client"]
    assert record.levelno == logging.DEBUG
    assert "model 'm' at grpc://server:8001 was refused unanswered" in record.getMessage()
    assert "retried once on a new connection" in record.getMessage()


class Channel:
    made = 0

    def __init__(self):
        Channel.made += 1
        self.number = Channel.made
        self.closed = False


def test_a_replaced_client_is_closed_once_its_calls_ended():
    slot = ClientSlot(Channel, lambda channel: setattr(channel, "closed", True))
    with slot.use() as (first, generation):
        assert generation == 0 and slot.fresh is None
        slot.replace(generation)
        assert not first.closed  # its call is in flight
        with slot.use() as (second, new_generation):
            assert second is not first and new_generation == 1 and slot.fresh is not None
    assert first.closed and not second.closed
    slot.replace(0)  # another call's replace of the same client: already done
    with slot.use() as (again, _):
        assert again is second
    slot.close()
    assert second.closed


def test_an_idle_replaced_client_is_closed_at_once_and_each_replace_has_its_fresh_number():
    slot = ClientSlot(Channel, lambda channel: setattr(channel, "closed", True))
    with slot.use() as (first, _):
        pass
    slot.replace(0)
    fresh = slot.fresh
    assert first.closed
    with slot.use():
        pass
    slot.replace(1)
    assert slot.fresh != fresh and slot.generation == 2


def test_the_asyncio_slot_closes_a_replaced_client_after_its_call():
    closed = []

    async def close(channel):
        closed.append(channel)

    async def main():
        slot = AsyncClientSlot(Channel, close)
        async with slot.use() as (first, generation):
            assert slot.current is first
            await slot.replace(generation)
            assert closed == []
            assert slot.current is not first
        assert closed == [first]
        await slot.close()
        assert len(closed) == 2

    asyncio.run(main())
