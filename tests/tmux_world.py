"""A real terminal for the tests: tmux runs a command in a pane on a tmux server of the
test's own (a private socket), the test types with send-keys and reads the screen with
capture-pane. `tmux_pane(home)` is the usual fixture body: a clean environment (no keys,
no EVERCHAT_ settings, EVERCHAT_HOME=`home`), killed and removed at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["Pane", "tmux_pane", "clean_env"]


class Pane:
    """One tmux pane running a command, on a tmux server of the test's own."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.socket = folder / "tmux.sock"
        self.env = env
        self.windows = 0
        self.target = "t"

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", str(self.socket), *args], env=self.env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr}"
        return done.stdout

    def start(self, *argv: str) -> str:
        """Run `argv` in a new 100x30 window; when it ends, the pane says `[exit N]`."""
        self.windows += 1
        name = f"w{self.windows}"
        line = " ".join(_quote(arg) for arg in argv) + '; echo "[exit $?]"; sleep 3600'
        if self.windows == 1:
            self.tmux("new-session", "-d", "-s", "t", "-n", name, "-x", "100", "-y", "30", line)
        else:
            self.tmux("new-window", "-t", "t", "-n", name, line)
        self.target = f"t:{name}"
        return name

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.target)

    def wait(self, text: str, timeout: float = 60.0, *, idle: bool = False) -> str:
        """Poll the screen until `text` is on it (capture-pane is a snapshot, not a stream);
        with `idle`, also until the status bar no longer says a reply is running."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            bar = [line for line in screen.splitlines() if line.strip()][-1:]
            if text in screen and not (idle and "replying" in "".join(bar)):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {text!r} on the screen:\n{screen}")
            time.sleep(0.05)  # polling another process's screen, with a deadline

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.target, "-l", text)
        self.tmux("send-keys", "-t", self.target, "Enter")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.target, *keys)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True, timeout=30)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def clean_env(home: Path | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without tmux's, Everchat's and the
    vendors' keys, with a UTF-8 xterm and EVERCHAT_HOME=`home` when given."""
    env = {key: value for key, value in (os.environ if base is None else base).items()
           if not key.startswith(("TMUX", "EVERCHAT_")) and key not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(TERM="xterm-256color", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    if home is not None:
        env["EVERCHAT_HOME"] = str(home)
    return env


@contextmanager
def tmux_pane(env: dict[str, str]) -> Iterator[Pane]:
    """A pane whose tmux server lives in a short temporary folder (unix sockets allow about
    100 bytes), killed and removed at the end."""
    assert shutil.which("tmux"), "tmux is needed (.ci/run installs it)"
    folder = Path(tempfile.mkdtemp(prefix="ect-"))
    pane = Pane(folder, env)
    try:
        yield pane
    finally:
        pane.kill()
        shutil.rmtree(folder, ignore_errors=True)
