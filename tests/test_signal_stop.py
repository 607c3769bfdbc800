"""A stop signal sets the stop event without taking its lock inside the handler: `serve`
(and `web`, and every actor process) once hung for good when SIGTERM landed while the main
thread was inside `stop.wait()` holding the event's lock (seen in CI under load)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from everchat.actors.supervisor.process import SignalStop


@pytest.fixture
def usr2():
    previous = signal.getsignal(signal.SIGUSR2)
    yield signal.SIGUSR2
    signal.signal(signal.SIGUSR2, previous)


@pytest.mark.timeout(60)
def test_a_signal_while_the_main_thread_holds_the_events_lock_still_sets_it(usr2):
    stop = threading.Event()
    SignalStop(stop, usr2).start()
    with stop._cond:  # where stop.wait() is between taking the lock and waiting on it
        os.kill(os.getpid(), usr2)
        for _ in range(1000):  # the handler runs at the next bytecodes, here, lock held
            pass
        assert not stop.is_set()
    assert stop.wait(30)


@pytest.mark.timeout(60)
def test_a_signal_before_the_relay_starts_waits_in_the_pipe(usr2):
    stop = threading.Event()
    on_signal = SignalStop(stop, usr2)
    os.kill(os.getpid(), usr2)
    assert not stop.wait(0.05)  # no relay yet: nothing set, nothing lost
    on_signal.start()
    assert stop.wait(30)


_OTHER_THREAD = r"""
import os, signal, sys, threading, time
from everchat.actors.supervisor.process import SignalStop

stop = threading.Event()
SignalStop(stop, signal.SIGUSR2).start()
ready = threading.Event()

def bystander():
    ready.set()
    time.sleep(120)

thread = threading.Thread(target=bystander, daemon=True)
thread.start()
ready.wait()

def send():
    time.sleep(0.2)  # let the main thread block in stop.wait() first
    signal.pthread_kill(thread.ident, signal.SIGUSR2)  # the signal lands on another thread

threading.Thread(target=send, daemon=True).start()
stop.wait()  # no timeout: only the relay can end it
print("stopped", flush=True)
"""


@pytest.mark.timeout(120)
def test_a_signal_taken_by_another_thread_still_wakes_a_main_thread_blocked_in_wait(tmp_path):
    """The kernel gives a process signal to any thread; Python runs handlers in the main
    thread only when it runs. A main thread blocked in stop.wait() with the signal taken by
    another thread slept for good (serve hung after SIGTERM once the device hub's threads
    came); the wake-up fd reaches the relay whichever thread takes the signal."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _OTHER_THREAD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "stopped\n", done.stderr
