"""SIGTERM handled as Ctrl-C: the same clean-up runs, whichever of the two stops a command.

A plain SIGTERM (``kill PID``, a scheduler stopping a job, a container shutting down) would end Python at
once, skipping the ``finally`` blocks that remove a writer's temporaries or a run directory with nothing
to resume. Inside :func:`interrupts_as_keyboard` it raises :class:`Terminated`, a ``KeyboardInterrupt``,
so every clean-up written for Ctrl-C runs for it too. A handler someone else installed (submitit's in a
cluster task, which keeps the job alive for its requeue) is left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would raise KeyboardInterrupt (exit status 143 on the command line)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def interrupts_as_keyboard() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the block (main thread only, and only where SIGTERM still has
    its default action); the previous handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
