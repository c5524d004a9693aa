"""The order of the drain's unloads (tritonrt.server.drain): callers before the models they call (BLS)."""

from tritonrt.server.drain import _next_wave

CHAIN = {("a", "b"), ("b", "c")}  # a calls b, which calls c


def test_a_chain_is_unloaded_from_its_first_caller_on():
    assert _next_wave({"a", "b", "c", "plain"}, {"a", "b", "c", "plain"}, CHAIN) == {"a", "plain"}


def test_a_callee_waits_while_its_caller_still_has_requests_in_flight():
    assert _next_wave({"b", "c"}, {"a", "b", "c"}, CHAIN) == set()  # a is unloading: its requests may call b
    assert _next_wave({"b", "c"}, {"b", "c"}, CHAIN) == {"b"}  # a is gone


def test_a_model_that_calls_itself_is_no_caller_of_its_own():
    assert _next_wave({"a"}, {"a"}, {("a", "a")}) == {"a"}


def test_models_that_call_each_other_are_unloaded_together():
    cycle = {("a", "b"), ("b", "a")}
    assert _next_wave({"a", "b"}, {"a", "b"}, cycle) == {"a", "b"}
