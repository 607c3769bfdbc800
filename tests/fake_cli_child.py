"""A stand-in for a subscription CLI, for tests/test_cli_bridge.py: speaks Claude Code's
stream-json output and reaches our tools through the real MCP bridge, like `claude` does.

    python fake_cli_child.py FOLDER MODE     (MODE: reply, tool, stubborn, hang, garbage, exit)
"""

import json
import os
import subprocess
import sys
import time

folder, mode = sys.argv[1], sys.argv[2]
request = json.loads(sys.stdin.readline())


def out(event):
    print(json.dumps(event), flush=True)


def text(piece):
    out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": piece}}})


def message(stop, usage):
    out({"type": "stream_event", "event": {"type": "message_start", "message": {"usage": usage}}})
    return lambda: (out({"type": "stream_event", "event": {"type": "message_delta",
                                                            "delta": {"stop_reason": stop}, "usage": usage}}),
                    out({"type": "stream_event", "event": {"type": "message_stop"}}))


def result(stop="end_turn"):
    out({"type": "result", "subtype": "success", "is_error": False, "stop_reason": stop, "result": ""})


if mode == "reply":
    end = message("end_turn", {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 5})
    seen = " ".join(b.get("text", "") for b in request["message"]["content"])
    for piece in ("Hel", "lo ", seen[-5:]):
        text(piece)
    end()
    result()
elif mode in ("tool", "stubborn"):
    bridge = subprocess.Popen([sys.executable, "-m", "everchat.actors.models._mcp_bridge", folder],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def rpc(rid, method, params):
        bridge.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n")
        bridge.stdin.flush()
        return json.loads(bridge.stdout.readline())

    rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
    tools = rpc(2, "tools/list", {})["result"]["tools"]
    end = message("tool_use", {"input_tokens": 7, "output_tokens": 2})
    text("Looking. ")
    end()
    answer = rpc(3, "tools/call", {"name": "zoom", "arguments": {"id": 3},
                                   "_meta": {"claudecode/toolUseId": "toolu_fake_1"}})["result"]
    if mode == "stubborn":  # never ends by itself: only the bridge's lifeline ends it
        time.sleep(600)
    end = message("end_turn", {"input_tokens": 9, "output_tokens": 4})
    text(f"tools={[t['name'] for t in tools]} error={answer['isError']} got: ")
    text(" | ".join(p.get("text", p.get("mimeType", "")) for p in answer["content"]))
    end()
    result()
elif mode == "hang":
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_CLI_PIDS"], "w") as f:
        f.write(f"{os.getpid()} {sleeper.pid}")
    text("Thinking about it")
    time.sleep(600)
elif mode == "garbage":
    print("this is not JSON", flush=True)
    time.sleep(600)
elif mode == "exit":
    print("fake cli: something broke", file=sys.stderr, flush=True)
    sys.exit(3)
