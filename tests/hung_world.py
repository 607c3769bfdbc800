"""A model server that accepts every connection and never answers (P10): the hung call a
stop must not wait for. It reads and drops what comes, holds each connection open, and
counts them; leaving the `with` closes them all and ends its thread."""

from __future__ import annotations

import selectors
import socket
import threading

__all__ = ["HungServer"]


class HungServer:
    """`with HungServer() as hung:` then `hung.url` (http://127.0.0.1:PORT); `hung.accepted`
    counts the connections taken, `wait_accepted(n, timeout)` waits for n of them."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._held: list[socket.socket] = []
        self._changed = threading.Condition()
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, name="hung-server", daemon=True)

    def __enter__(self) -> "HungServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._wake_w.send(b"x")
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the hung server's thread did not end"
        for sock in self._held:
            sock.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def wait_accepted(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.accepted >= count, timeout)

    def _serve(self) -> None:
        while True:
            for key, _ in self._selector.select():
                sock = key.fileobj
                if sock is self._wake_r:
                    return
                if sock is self._listener:
                    try:
                        conn, _ = self._listener.accept()
                    except BlockingIOError:
                        continue
                    conn.setblocking(False)
                    self._held.append(conn)
                    self._selector.register(conn, selectors.EVENT_READ)
                    with self._changed:
                        self.accepted += 1
                        self._changed.notify_all()
                    continue
                try:
                    data = sock.recv(65536)  # the request: read, never answered
                except OSError:
                    data = b""
                if not data:  # the client gave up: its side is closed
                    self._selector.unregister(sock)
