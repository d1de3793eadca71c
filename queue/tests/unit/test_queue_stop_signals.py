"""Stop signals: the first drains, a forwarded copy is ignored, a real second one exits."""

import signal

from reliable_queue.shutdown import REPEAT_WINDOW_SECONDS, StopRequest, StopSignals


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_signal_drains() -> None:
    assert StopSignals(clock=Clock()).receive(signal.SIGTERM) is StopRequest.DRAIN


def test_the_same_signal_forwarded_a_millisecond_later_is_not_a_second_request() -> None:
    clock = Clock()
    signals = StopSignals(clock=clock)
    signals.receive(signal.SIGTERM)
    clock.now += 0.001  # `uv run` forwarding the SIGTERM the process group got

    assert signals.receive(signal.SIGTERM) is StopRequest.REPEAT
    clock.now += 0.001
    assert signals.receive(signal.SIGTERM) is StopRequest.REPEAT  # a second forwarder


def test_the_same_signal_after_the_window_exits_now() -> None:
    clock = Clock()
    signals = StopSignals(clock=clock)
    signals.receive(signal.SIGTERM)
    clock.now += REPEAT_WINDOW_SECONDS

    assert signals.receive(signal.SIGTERM) is StopRequest.EXIT


def test_a_different_signal_within_the_window_exits_now() -> None:
    clock = Clock()
    signals = StopSignals(clock=clock)
    signals.receive(signal.SIGTERM)
    clock.now += 0.001

    assert signals.receive(signal.SIGINT) is StopRequest.EXIT


def test_the_window_is_long_enough_for_a_loaded_machine_and_short_for_a_person() -> None:
    assert 0.1 <= REPEAT_WINDOW_SECONDS <= 1.0
