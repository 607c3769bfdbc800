"""Issue 3: fuzz the real actors of a running chat, and feed them valid but wrong input.

One chat runs for the whole module: every actor in its own process over ipc (the log
writer, the planner, two compactor workers), started by the Supervisor with the scripted
summarizer. A dozen messages are logged and the pool goes idle; then the chat folder and
every process's statistics are snapshot. Hypothesis then sends raw frames over a plain
pyzmq DEALER to each process's real socket, aimed at every actor there (the supervisor,
each actor, each process's node agent): random bytes, several frames, truncated requests,
huge declared lengths, good headers over wrong bodies, valid messages the actor has no
handler for, requests past their deadline, tells to names the process does not host.

After each frame a Ping on the same connection comes back (the gateway reads a
connection in order), and the counters that the gateway bumps are exact at once:
`dropped_bad` of the gateway or of the actor the header named, `dropped_late`, the
gateway's `errors`. Counters an actor's own thread bumps (`errors`, for a message it has
no handler for) are checked at the end, once the workers had something to do. Every ask
among the frames gets its error reply. Afterwards every actor is alive and answering,
nothing restarted, the folder is byte for byte the snapshot, and the chat still builds.
The tests "after the fuzz" take the `fuzzed` fixture, which runs whatever fuzz test has
not run on the shared chat yet: each test passes alone and in any order. Only
`World.append` changes the chat (it checks that it only grew, and retakes the snapshot).

Valid but wrong requests (an oversize Append, a ReadMessage past the end, a node that
does not exist, a Register from a stranger, a Directory sent to the supervisor) get a
clear error reply and change nothing. The planner's own cases run on fresh chats at the
test_actor_wrong_input.py (a wrong input there must not poison the shared one).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from pathlib import Path

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from everchat.actors.tree import Budget
from everchat.actors.supervisor.actor import NodeAgent, Placement, Supervisor, SupervisorActor, actor_names, build_actor
from everchat.transport import BadFrame, RemoteError, schema
from everchat.transport import _wire as wire

from schema_strategies import message_strategies
from polling import folder_bytes, message_text, wait_until

BUDGET = Budget(ceiling=4000, floor=2000, cceiling=1500, cfloor=800, jobs=2)
PLACEMENT = Placement("processes", workers=2, summarizer="scripted")
PROCESSES = ["supervisor"] + actor_names(PLACEMENT)      # every actor has a process of its own
MESSAGES = 12
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SYNC = ("dropped_bad", "dropped_late")          # bumped by the gateway thread: exact at the barrier
COUNTED = ("dropped_bad", "dropped_late", "errors")
FAR = 4e9                                        # a deadline nobody reaches (wall clock, 2096)
TYPES = sorted(schema.types())
STRATEGIES = {cls.type_name: strategy for cls, strategy in message_strategies().items()}





class World:
    """The running chat, a raw DEALER per process, and what the fuzz expects to be counted."""

    def __init__(self, supervisor: Supervisor, chat: Path) -> None:
        self.supervisor = supervisor
        self.chat = chat
        node = supervisor.node
        self.processes = {"supervisor": node.endpoint}
        self.hosted = {"supervisor": ["supervisor"]}
        self.classes = {"supervisor": SupervisorActor}
        for name, child in supervisor.children.items():
            self.processes[name] = child.endpoint
            self.hosted[name] = [name, f"node.{name}"]
            self.classes[f"node.{name}"] = NodeAgent
            self.classes[name] = build_actor(name, chat, BUDGET)[0]
        self.pids = {name: child.pid for name, child in supervisor.children.items()}
        self.ctx = zmq.Context()
        self.dealers = {}
        for process, endpoint in self.processes.items():
            dealer = self.ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(endpoint)
            self.dealers[process] = dealer
        self.rids = itertools.count(1000)
        self.expected: Counter = Counter()          # (process, row name, field) -> increase
        self.asks: dict[tuple[str, int], str] = {}  # (process, request id) -> expected ErrorReply kind
        self.replies: dict[tuple[str, int], schema.Message] = {}
        self.baseline = self.counters()
        self.snapshot = folder_bytes(chat)
        self.messages = MESSAGES     # grows only through `append`
        self.frames = 0              # sent by `send`
        self.fuzzed: set[str] = set()  # the fuzz tests that ran on this world

    def planned(self) -> int:
        """The messages the planner was told of (PlannerStatus never asks the log, unlike
        PoolIdle and SettleView, which catch up with it)."""
        return self.supervisor.node.ask("planner", schema.PlannerStatus(), timeout=10.0).status["messages"]

    def append(self, texts: list[str]) -> None:
        """Log `texts`, see the log writer's notice reach the planner, and wait until the
        pool is idle. Nothing but an append changes the chat: the folder is the snapshot
        before, and the message and tree files only grow. The snapshot is then taken
        again, so the tests after this one compare with it."""
        assert folder_bytes(self.chat) == self.snapshot
        assert self.planned() == self.messages
        node = self.supervisor.node
        first = self.messages
        items = [schema.Append("user", text, f"append-{first + n}", [], None) for n, text in enumerate(texts)]
        assert node.ask("log_writer", schema.AppendMany(items), timeout=10.0) == \
            schema.AppendedMany([[first + n] for n in range(len(texts))])
        wait_until(lambda: self.planned() == first + len(texts), 20.0, "the log writer's notice to the planner")
        assert node.ask("planner", schema.PoolIdle(), timeout=60.0).idle
        now = folder_bytes(self.chat)
        for name in self.snapshot:
            if name.startswith(("main/", "tree/")):
                assert now[name].startswith(self.snapshot[name]) and len(now[name]) > len(self.snapshot[name])
        self.snapshot = now
        self.messages += len(texts)

    def close(self) -> None:
        for dealer in self.dealers.values():
            dealer.close(0)
        self.ctx.term()

    # -- statistics --

    def rows(self, process: str) -> dict[str, dict]:
        """The statistics rows of one process by row name ("gateway" for its gateway)."""
        if process == "supervisor":
            node = self.supervisor.node
            rows = [s.to_dict() for s in node.statistics()] + [node.gateway_statistics().to_dict()]
        else:
            rows = self.supervisor.node.ask(f"node.{process}", schema.StatsRequest(), timeout=10.0).actors
        return {row["name"]: row for row in rows}

    def counters(self) -> dict[tuple[str, str, str], int]:
        return {(process, name, field): row[field] for process in self.processes
                for name, row in self.rows(process).items() for field in COUNTED}

    def grown(self, process: str, fields=COUNTED) -> dict:
        """(actual increase, expected increase) of `fields` in every row of `process`."""
        actual, expected = {}, {}
        for name, row in self.rows(process).items():
            for field in fields:
                key = (process, name, field)
                actual[key] = row[field] - self.baseline[key]
                expected[key] = self.expected[key]
        return actual, expected

    # -- sending --

    def send(self, process: str, frames: list[bytes], counted: tuple[str, str] | None,
             reply_kind: str | None = None, request_id: int | None = None) -> None:
        """Send raw frames to a process, expect them counted as `counted` (row name, field),
        and, for an ask, an ErrorReply of `reply_kind`; then check the gateway's counters."""
        self.dealers[process].send_multipart(frames)
        self.frames += 1
        if counted is not None:
            self.expected[(process, *counted)] += 1
        if reply_kind is not None:
            self.asks[(process, request_id)] = reply_kind
        self.barrier(process)
        self.check_gateway(process)

    def check_gateway(self, process: str) -> None:
        """The counters the gateway thread bumps are exact once a barrier is back (those an
        actor's own thread bumps may still be on their way)."""
        actual, expected = self.grown(process, SYNC)
        gateway = (process, "gateway", "errors")
        actual[gateway] = self.rows(process)["gateway"]["errors"] - self.baseline[gateway]
        expected[gateway] = self.expected[gateway]
        assert actual == expected

    def barrier(self, process: str) -> None:
        """A Ping to the process's node agent on the same connection: when its Pong is back,
        the gateway has handled every frame sent before it."""
        agent = "supervisor" if process == "supervisor" else f"node.{process}"
        rid = next(self.rids)
        dealer = self.dealers[process]
        dealer.send(wire.request_frame(wire.ASK, rid, agent, "fuzzer", FAR, schema.Ping(b"barrier")))
        while self.receive(process, 10.0) != rid:
            pass
        assert self.replies.pop((process, rid)) == schema.Pong(b"barrier")

    def receive(self, process: str, timeout: float) -> int:
        dealer = self.dealers[process]
        if not dealer.poll(int(timeout * 1000)):
            raise AssertionError(f"no reply from {process} within {timeout} s")
        rid, body = wire.parse_reply(dealer.recv())
        self.replies[(process, rid)] = schema.from_obj(body)
        return rid

    def ask_frame(self, target: str, body, deadline: float = FAR) -> tuple[int, bytes]:
        rid = next(self.rids)
        return rid, msgpack.packb([wire.ASK, rid, target, "fuzzer", deadline, body])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    chat = tmp_path_factory.mktemp("actor-fuzz") / "chat"
    supervisor = Supervisor(chat, PLACEMENT, BUDGET).start()
    try:
        node = supervisor.node
        for n in range(MESSAGES):
            node.ask("log_writer", schema.Append("user", message_text(n), f"fuzz-{n}", [], None), timeout=10.0)
        node.ask("planner", schema.PoolIdle(), timeout=30.0)
        world = World(supervisor, chat)
        assert any(key.startswith("tree/") for key in world.snapshot), "the chat should have built nodes"
        yield world
        world.close()
    finally:
        supervisor.stop()


# -- what to aim at ---------------------------------------------------------------------

def targets(world: World) -> list[tuple[str, str]]:
    """(process, actor) for every actor of the chat."""
    return [(process, name) for process, names in world.hosted.items() for name in names]


def unhandled(cls: type) -> list[str]:
    return [name for name in TYPES if getattr(cls, schema.types()[name].handler, None) is None]


def counted_where(frame: bytes, target: str) -> tuple[str, str]:
    """A bad body under a good header counts against its actor, unless the frame as a whole
    is not msgpack by our rules (a map key that is not a str, ...): then no header can be
    read and the gateway counts it."""
    try:
        msgpack.unpackb(frame)
        return (target, "dropped_bad")
    except (ValueError, TypeError):
        return ("gateway", "dropped_bad")


def is_request(data: bytes) -> bool:
    try:
        wire.parse_request(data)
        return True
    except BadFrame:
        return False


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5) | st.integers(0, 9), inner,
                                                                 max_size=3),
    max_leaves=10)


AIMS = [("supervisor", "supervisor")] + [(p, name) for p in PROCESSES[1:] for name in (p, f"node.{p}")]
aimed = st.sampled_from(AIMS)     # (process, actor): every actor of the chat


def test_the_aims_are_every_actor_of_the_chat(world):
    assert sorted(AIMS) == sorted(targets(world))


def test_a_frame_over_the_size_limit_is_cut_off_by_zeromq_and_the_process_goes_on(world):
    """ZeroMQ drops a connection that sends more than MAX_WIRE bytes in one frame: nothing
    reaches the gateway, so nothing is counted; the process and its actors go on."""
    for process in ("log_writer", "planner"):
        rogue = world.ctx.socket(zmq.DEALER)
        monitor = rogue.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        rogue.connect(world.processes[process])
        rogue.send(b"\x00" * (wire.MAX_WIRE + 1))
        assert monitor.poll(10_000), "ZeroMQ should have cut the connection"
        rogue.disable_monitor()
        monitor.close(0)
        rogue.close(0)
        world.barrier(process)
        world.check_gateway(process)
    assert all(child.process.poll() is None for child in world.supervisor.children.values())


# -- the fuzz ---------------------------------------------------------------------------

FUZZ_TESTS: list = []  # every fuzz test below, for the `fuzzed` fixture


def fuzz(test):
    """A fuzz test: hypothesis's settings, and a place in FUZZ_TESTS."""
    test = FUZZ(test)
    FUZZ_TESTS.append(test)
    return test


@pytest.fixture(autouse=True)
def _note_the_fuzz_that_ran(request):
    """A fuzz test that ran on the shared world is noted there: `fuzzed` runs only the others."""
    yield
    world = request.node.funcargs.get("world")
    if world is not None and request.function in FUZZ_TESTS:
        world.fuzzed.add(request.function.__name__)


@pytest.fixture(scope="module")
def fuzzed(world) -> int:
    """The tests after the fuzz need it to have run, in any order and alone: this runs each
    fuzz test that has not run on the world yet, and returns how many frames were sent to
    the world so far."""
    for test in FUZZ_TESTS:
        if test.__name__ not in world.fuzzed:
            test(world=world)
            world.fuzzed.add(test.__name__)
    assert world.fuzzed == {test.__name__ for test in FUZZ_TESTS}
    return world.frames


@fuzz
@given(aimed, st.binary(max_size=300))
def test_random_bytes_to_any_actor_are_dropped_and_counted_by_its_gateway(world, aim, data):
    assume(not is_request(data))
    world.send(aim[0], [data], ("gateway", "dropped_bad"))


@fuzz
@given(aimed, st.lists(st.binary(max_size=20), min_size=2, max_size=5))
def test_a_request_of_several_frames_is_dropped_and_counted(world, aim, parts):
    world.send(aim[0], parts, ("gateway", "dropped_bad"))


@fuzz
@given(aimed, st.sampled_from(TYPES), st.data())
def test_a_truncated_request_to_any_actor_is_dropped_and_counted(world, aim, type_name, data):
    msg = data.draw(STRATEGIES[type_name])
    kind = data.draw(st.sampled_from([wire.TELL, wire.ASK]))
    frame = wire.request_frame(kind, 7, aim[1], "fuzzer", FAR if kind == wire.ASK else None, msg)
    cut = data.draw(st.integers(min_value=0, max_value=len(frame) - 1))
    world.send(aim[0], [frame[:cut]], ("gateway", "dropped_bad"))


HUGE = [b"\xdd\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff",
        b"\xdd\x7f\xff\xff\xff", b"\xc6\x00\xff\xff\xff"]


@fuzz
@given(aimed, st.sampled_from(HUGE), st.sampled_from(["header", "target", "body", "field"]))
def test_huge_declared_lengths_are_dropped_and_counted(world, aim, claim, where):
    head = b"\x96\x01\x00"
    named = head + msgpack.packb(aim[1]) + msgpack.packb("fuzzer") + b"\xc0"
    frame = {"header": claim, "target": head + claim, "body": named + claim,
             "field": named + b"\x92" + msgpack.packb("Append") + b"\x95" + claim}[where]
    world.send(aim[0], [frame], ("gateway", "dropped_bad"))


@fuzz
@given(aimed, st.sampled_from(TYPES) | st.text(max_size=12), st.lists(values, max_size=8), st.booleans())
def test_a_good_header_over_a_wrong_body_is_counted_against_its_actor(world, aim, type_name, fields, ask):
    """Wrong field types, wrong field counts, unknown type names."""
    process, target = aim
    body = [type_name, fields]
    try:
        schema.from_obj(body)
        assume(False)                     # hypothesis made a valid message: not this test's case
    except BadFrame:
        pass
    if ask:
        rid, frame = world.ask_frame(target, body)
    else:
        rid, frame = None, msgpack.packb([wire.TELL, 0, target, "fuzzer", None, body])
    where = counted_where(frame, target)
    answered = ask and where[0] == target        # the gateway answers an ask it could read
    world.send(process, [frame], where, "transport:BadFrame" if answered else None, rid)


@fuzz
@given(aimed, values)
def test_any_object_where_a_message_goes_never_reaches_the_actor(world, aim, body):
    try:
        schema.from_obj(body)
        assume(False)
    except BadFrame:
        pass
    frame = msgpack.packb([wire.TELL, 0, aim[1], "fuzzer", None, body])
    world.send(aim[0], [frame], counted_where(frame, aim[1]))


@fuzz
@given(aimed, st.data(), st.booleans())
def test_a_valid_message_the_actor_does_not_handle_is_counted_as_an_error(world, aim, data, ask):
    process, target = aim
    type_name = data.draw(st.sampled_from(unhandled(world.classes[target])))
    msg = data.draw(STRATEGIES[type_name])
    body = schema.to_obj(msg)
    if ask:
        rid, frame = world.ask_frame(target, body)
        world.send(process, [frame], (target, "errors"), "transport:Unhandled", rid)
    else:
        world.send(process, [msgpack.packb([wire.TELL, 0, target, "fuzzer", None, body])], (target, "errors"))


@fuzz
@given(aimed, st.sampled_from(TYPES), st.data(), st.floats(min_value=0.001, max_value=1e9) | st.just(float("inf")))
def test_a_request_past_its_deadline_is_not_run_and_is_counted_late(world, aim, type_name, data, ago):
    """Any message, also those the actor handles (an Append, a Register, a Directory):
    not run, so nothing changes; no reply either, the asker stopped waiting."""
    msg = data.draw(STRATEGIES[type_name])
    _, frame = world.ask_frame(aim[1], schema.to_obj(msg), time.time() - ago)
    world.send(aim[0], [frame], (aim[1], "dropped_late"))


@fuzz
@given(aimed, st.sampled_from(["planner", "log_writer", "supervisor", "compactor.0", "node.planner", "ghost"])
       | st.text(max_size=12), st.sampled_from(TYPES), st.data())
def test_a_tell_to_a_name_the_process_does_not_host_is_counted_by_its_gateway(world, aim, name, type_name, data):
    process = aim[0]
    assume(name not in world.hosted[process])
    msg = data.draw(STRATEGIES[type_name])
    world.send(process, [wire.request_frame(wire.TELL, 0, name, "fuzzer", None, msg)], ("gateway", "errors"))


def test_an_ask_for_a_name_the_process_does_not_host_is_answered_actor_stopped(world):
    for process in world.processes:
        rid, frame = world.ask_frame("ghost", ["Ping", [b"x"]])
        world.send(process, [frame], None, "transport:ActorStopped", rid)


# -- valid but wrong: the log writer and the supervisor ----------------------------------

def _refused(world: World, target: str, msg: schema.Message, kind: str, text: str) -> None:
    """`msg` gets RemoteError(kind, text) and changes nothing; counted as an error."""
    process = target if target in world.processes else "supervisor"
    with pytest.raises(RemoteError) as caught:
        world.supervisor.node.ask(target, msg, timeout=30.0)
    assert (caught.value.kind, caught.value.text) == (kind, text)
    world.expected[(process, target, "errors")] += 1
    assert folder_bytes(world.chat) == world.snapshot


def test_r8_an_append_over_the_size_limit_is_refused_and_logs_nothing(world):
    text = "x" * (8 * 1024 * 1024 + 1)
    _refused(world, "log_writer", schema.Append("user", text, "too-big", [], None),
             "BadInput", "a text of 8388609 characters is over 8388608 bytes")


def test_r3_an_append_of_an_unknown_kind_is_refused(world):
    _refused(world, "log_writer", schema.Append("robot", "hi", None, [], None), "BadInput",
             "kind 'robot' is not one of ['echo', 'everchat', 'note', 'tool', 'user', 'work'] (R3)")


def test_r9_an_append_naming_an_image_never_stored_is_refused(world):
    digest = "0" * 64
    _refused(world, "log_writer", schema.Append("user", "look", None, [digest], None), "BadInput",
             f"no asset {digest}: store it with put_asset first (R9)")


def test_an_append_many_with_one_bad_item_logs_none_of_them(world):
    items = [schema.Append("user", "fine", "many-1", [], None), schema.Append("user", "x", "", [], None)]
    _refused(world, "log_writer", schema.AppendMany(items), "BadInput", "key must be a non-empty str")


@pytest.mark.parametrize("past", [0, 1000, None])
def test_r2_reading_a_message_past_the_end_is_refused(world, past):
    i = -1 if past is None else world.messages + past
    _refused(world, "log_writer", schema.ReadMessage(i), "BadInput",
             f"no message {i}: the chat has ids 0 ... {world.messages - 1}")


@pytest.mark.parametrize("node, text", [((-1, 0), "node(-1, 0): l and i are natural numbers"),
                                        ((0, -3), "node(0, -3): l and i are natural numbers"),
                                        ((63, 0), "level 63 is above 62")])
def test_r10_reading_a_node_that_cannot_exist_is_refused(world, node, text):
    _refused(world, "log_writer", schema.ReadNodes([node]), "BadInput", text)


def test_r10_saving_a_node_past_the_last_message_is_refused(world):
    n = world.messages
    _refused(world, "log_writer", schema.SaveNodes([(0, n, "a line")]), "BadInput",
             f"node(0, {n}) covers messages up to {n}; the chat has {n} (R10)")


def test_r12_saving_a_built_node_again_with_another_text_is_refused(world):
    _refused(world, "log_writer", schema.SaveNodes([(0, 0, "another text")]), "StoreError",
             "node(0, 0) is already built with another text; a node is built once (R12)")


def test_r25_a_merge_record_past_the_message_count_is_refused(world):
    n = world.messages
    with pytest.raises(RemoteError) as caught:
        world.supervisor.node.ask("log_writer", schema.SaveMerge([], n + 1, False), timeout=10.0)
    assert caught.value.kind == "BadInput"
    assert caught.value.text.startswith(f"t={n + 1} must be an int in ")
    assert caught.value.text.endswith(f" ... {n} (t never decreases, R25)")
    world.expected[("log_writer", "log_writer", "errors")] += 1
    assert folder_bytes(world.chat) == world.snapshot


def test_a_register_for_a_name_that_is_not_in_the_chat_is_refused(world):
    supervisor = world.supervisor
    _refused(world, "supervisor", schema.Register("intruder", "elsewhere", 4242, "ipc:///tmp/intruder"),
             "ValueError", f"{supervisor}: no actor called 'intruder' belongs to this chat")


def test_a_register_of_a_running_actor_from_another_process_is_refused_and_routes_stay(world):
    supervisor = world.supervisor
    routes = dict(supervisor.routes)
    pid = supervisor.children["planner"].pid
    _refused(world, "supervisor", schema.Register("planner", "elsewhere", 4242, "ipc:///tmp/impostor"),
             "ValueError", f"{supervisor}: planner runs in pid {pid}; a Register from pid 4242 on elsewhere is refused")
    assert supervisor.routes == routes


def test_a_register_with_an_endpoint_that_is_no_address_is_refused(world):
    routes = dict(world.supervisor.routes)
    _refused(world, "supervisor", schema.Register("planner", "here", os.getpid(), "carrier pigeon"),
             "TransportError", "unsupported endpoint 'carrier pigeon': use ipc://PATH or tcp://HOST:PORT;events=PORT;key=KEY")
    assert world.supervisor.routes == routes


def test_a_directory_sent_to_the_supervisor_is_refused(world):
    supervisor = world.supervisor
    _refused(world, "supervisor", schema.Directory({"planner": "ipc:///tmp/impostor"}), "ValueError",
             f"SupervisorActor supervisor@{supervisor.node.ident}: the supervisor keeps the directory and "
             "takes none from supervisor")


def test_a_directory_with_one_bad_endpoint_changes_no_route(world):
    """The good entry first: applied alone, it would send the log writer's notices for the
    planner to nowhere. The routes of the log writer's process cannot be read from here, so
    they are compared by what they do: the next message's notice still reaches the planner
    (`World.append` checks it)."""
    node = world.supervisor.node
    with pytest.raises(RemoteError) as caught:
        node.ask("node.log_writer", schema.Directory({"planner": "ipc:///tmp/nowhere", "ghost": "not an endpoint"}),
                 timeout=10.0)
    assert (caught.value.kind, caught.value.text) == \
        ("TransportError", "unsupported endpoint 'not an endpoint': use ipc://PATH or tcp://HOST:PORT;events=PORT;key=KEY")
    world.expected[("log_writer", "node.log_writer", "errors")] += 1
    world.append([message_text(1) + " after a bad directory"])


# -- afterwards -----------------------------------------------------------------------------

def test_after_the_fuzz_every_actor_is_alive_and_answers_and_none_restarted(world, fuzzed):
    assert fuzzed > 8 * 100, "the fuzz should have sent hundreds of frames"
    supervisor, node = world.supervisor, world.supervisor.node
    for process in world.processes:
        world.barrier(process)
    assert node.ask("log_writer", schema.CountMessages(), timeout=10.0) == schema.MessageCount(world.messages)
    assert node.ask("planner", schema.PoolIdle(), timeout=10.0) == schema.Idle(True, 0, 0)
    for name, child in supervisor.children.items():
        assert (child.pid, child.process.poll(), child.restarts) == (world.pids[name], None, 0)
    live = {(process, name) for process in world.processes for name in world.rows(process)}
    assert live == set(targets(world)) | {(process, "gateway") for process in world.processes}


def test_after_the_fuzz_the_chat_folder_is_byte_identical(world, fuzzed):
    """The snapshot is the one taken after the last append (`World.append`), if any."""
    assert fuzzed > 8 * 100, "the fuzz should have sent hundreds of frames"
    assert folder_bytes(world.chat) == world.snapshot


def test_after_the_fuzz_every_frame_was_counted_once_every_ask_answered_and_the_chat_still_builds(world, fuzzed):
    """The workers wait in the planner for a job; two new messages give each one, and then
    they handle what the fuzz queued behind it. `World.append` checks the chat grows by
    appends only."""
    assert fuzzed > 8 * 100, "the fuzz should have sent hundreds of frames"
    world.append([message_text(1) + f" after {n}" for n in range(2)])

    def all_counted():
        grown = [world.grown(process) for process in world.processes]
        return all(actual == expected for actual, expected in grown) or None

    try:
        wait_until(all_counted, 40.0, "the counters")
    except AssertionError:
        for process in world.processes:           # name the counters that disagree
            actual, expected = world.grown(process)
            assert {k: v for k, v in actual.items() if v} == {k: v for k, v in expected.items() if v}
        raise
    for process, rid in list(world.asks):
        while (process, rid) not in world.replies:
            world.receive(process, 30.0)
    got = {key: world.replies[key] for key in world.asks}
    assert {key: reply.kind for key, reply in got.items()} == world.asks
    assert all(isinstance(reply, schema.ErrorReply) for reply in got.values())
