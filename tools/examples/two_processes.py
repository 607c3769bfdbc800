"""Two actors in two processes: this one asks, the other one answers.

    python tools/examples/two_processes.py

The parent starts a Node, hosts `greeter`, and starts a child process that hosts `echo` on
an ipc endpoint and prints it. The parent routes the name "echo" to that endpoint (in
Everchat the supervisor sends these routes as a Directory) and asks `greeter`, which asks
`echo` in the other process. Swap the ipc bind for "tcp://127.0.0.1:0" and pass a KeyStore
to both nodes to do the same between hosts.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

from everchat.transport import Actor, Node, schema


class Echo(Actor):
    """Lives in the child process: answers a Ping with its payload."""

    def on_ping(self, msg: schema.Ping, delivery) -> schema.Pong:
        return schema.Pong(b"echo from " + self.node.ident.encode() + b": " + msg.payload)


class Greeter(Actor):
    """Lives in the parent: asks `echo`, wherever it is, and passes the answer on."""

    def on_ping(self, msg: schema.Ping, delivery) -> schema.Pong:
        return self.node.ask("echo", schema.Ping(b"hello, " + msg.payload), timeout=5.0)


def child(endpoint: str) -> None:
    with Node("child", bind=endpoint) as node:
        node.host("echo", Echo)
        print(node.endpoint, flush=True)
        sys.stdin.read()                     # serve until the parent closes our stdin


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.Popen([sys.executable, __file__, "--child", f"ipc://{folder}/child"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        endpoint = proc.stdout.readline().strip()
        with Node("parent") as node:
            node.host("greeter", Greeter)
            node.route("echo", endpoint)
            reply = node.ask("greeter", schema.Ping(b"world"), timeout=5.0)
            print(reply.payload.decode())
        proc.stdin.close()
        proc.wait()


if __name__ == "__main__":
    child(sys.argv[2]) if sys.argv[1:2] == ["--child"] else main()
