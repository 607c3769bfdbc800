"""The MCP server a CLI starts to reach our tools: `python -m everchat.actors.models._mcp_bridge FOLDER`.

A CLI-backed connection (`_cli.py`) writes `FOLDER/tools.json` (the MCP tool list) and
listens on `FOLDER/bridge.sock`; the CLI starts this process through its MCP config and
speaks MCP to it over stdin/stdout (newline-delimited JSON-RPC). Each `tools/call` is
forwarded over the socket as one JSON line and blocks until the connection sends the
result line back, so the CLI waits while our caller runs the tool.

It also keeps one "lifeline" connection to the socket, on which the connection names the
CLI's pid: when it closes (the connection ended the run, or its process died), this bridge
removes the run's folder and kills the CLI's process group, itself included (portable: no
prctl needed, macOS included), so no run outlives its owner. Run by hand, it kills nothing
but itself, and removes a folder only if it holds a run's socket.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import threading
from typing import Any

__all__ = ["main", "SOCKET_NAME", "TOOLS_NAME"]

SOCKET_NAME = "bridge.sock"
TOOLS_NAME = "tools.json"
_PROTOCOL = "2025-06-18"
_PARENT = os.getppid()  # the CLI that started us (it leads our process group when a connection started it)


def _connect(folder: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(folder, SOCKET_NAME))
    return sock


def _exchange(folder: str, message: dict[str, Any]) -> dict[str, Any]:
    """Send one line to the connection, read its one-line answer."""
    with _connect(folder) as sock:
        sock.sendall(json.dumps(message).encode() + b"\n")
        answer = sock.makefile("rb").readline()
    if not answer:
        return {"content": [{"type": "text", "text": "the chat ended this call"}], "isError": True}
    return json.loads(answer)


def _lifeline(folder: str) -> None:
    """Block on a connection the owner never writes to again (it first names the CLI's
    pid); its end ends the whole run: the CLI's process group, this bridge, the folder."""
    cli = None
    owned = False  # the folder is a run's: its owner answered, or died leaving its socket
    try:
        sock = _connect(folder)
        owned = True
        sock.sendall(b'{"lifeline": true}\n')
        reader = sock.makefile("rb")
        first = reader.readline()  # {"cli": PID}
        cli = json.loads(first).get("cli") if first else None
        reader.read()  # returns at EOF: the owner closed its end or died
    except ConnectionRefusedError:
        owned = True  # a socket nobody listens on: the owner died before our lifeline
    except (OSError, ValueError):
        pass
    if owned:  # never a folder without a run's socket (a bridge run by hand; issue 13)
        shutil.rmtree(folder, ignore_errors=True)  # the run's folder: its owner may be gone
    if isinstance(cli, int) and cli > 1:
        for kill in (os.killpg, os.kill):  # the CLI leads its own group (start_new_session)
            try:
                kill(cli, signal.SIGKILL)
            except OSError:
                pass
    elif os.getpgid(0) == _PARENT:  # the owner died before naming it: our group is the CLI's
        os.killpg(_PARENT, signal.SIGKILL)
    os._exit(0)


class _Server:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        with open(os.path.join(folder, TOOLS_NAME), encoding="utf-8") as f:
            self.tools = json.load(f)
        self._write = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._write:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def answer(self, request: dict[str, Any]) -> None:
        method, rid = request.get("method"), request.get("id")
        params = request.get("params") or {}
        if rid is None:
            return  # a notification (initialized, cancelled): nothing to answer
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", _PROTOCOL),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "everchat", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": self.tools}
        elif method == "ping":
            result = {}
        elif method == "tools/call":
            # a thread per call: the CLI may call several tools at once
            threading.Thread(target=self._call, args=(rid, params), daemon=True).start()
            return
        else:
            self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
            return
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def _call(self, rid: Any, params: dict[str, Any]) -> None:
        call = {"name": params.get("name", ""), "arguments": params.get("arguments") or {},
                "meta": params.get("_meta") or {}}
        try:
            result = _exchange(self.folder, call)
        except (OSError, ValueError) as error:
            result = {"content": [{"type": "text", "text": f"the chat could not run the tool: {error}"}],
                      "isError": True}
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m everchat.actors.models._mcp_bridge FOLDER", file=sys.stderr)
        return 2
    server = _Server(args[0])
    threading.Thread(target=_lifeline, args=(args[0],), daemon=True).start()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            server.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "not JSON"}})
            continue
        server.answer(request)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
