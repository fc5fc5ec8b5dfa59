"""SIGINT and SIGTERM as a command takes them: a typed stop, so that a command a user stops
ends with one line and status 128 + the signal (130, 143), never a traceback; and, around
work that must not be cut in the middle (a pipeline run's step), a stop deferred until the
work reaches a point where it can end."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was stopped by a signal."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def _raise(signum: int, _frame) -> None:
    raise Interrupted(signum)


def raise_on_stop_signals() -> None:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread (SIGTERM would otherwise end
    the process without a word)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise)


@dataclass
class StopRequest:
    signum: int | None = None  # the first stop signal received, if any

    @property
    def requested(self) -> bool:
        return self.signum is not None


@contextmanager
def deferred_stop() -> Iterator[StopRequest]:
    """While the block runs, the first SIGINT or SIGTERM is only recorded (the block looks at
    the request and stops where it can); a second one raises `Interrupted` at once. Outside
    the main thread, signals are not this process's to take: nothing is recorded."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def record(signum: int, _frame) -> None:
        if request.requested:
            raise Interrupted(signum)
        request.signum = signum

    previous = {signum: signal.signal(signum, record) for signum in STOP_SIGNALS}
    try:
        yield request
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
