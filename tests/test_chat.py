"""A chat folder end to end: the store and the planner core through `Chat` (R22, R24, R35)."""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
import shutil

import pytest

from everchat.actors.session.local import Chat, ZoomError
from everchat.actors.tree import Budget, key_of, name
from everchat.actors.folder import ChatStore, CorruptRecord

SMALL = Budget(ceiling=1500, floor=700, cceiling=600, cfloor=300, jobs=3)


def _drive(chat: Chat, count: int, seed: int, build_every: int = 1) -> None:
    """Log `count` messages; finish running compactions now and then, in random order."""
    rng = random.Random(seed)
    for n in range(count):
        size = rng.choice([10, 40, 200, 700, 1500])
        chat.add(rng.choice(["user", "everchat", "tool", "echo"]), f"m{chat.messages} " + "w" * size)
        if n % build_every == 0:
            _build_some(chat, rng)


def _build_some(chat: Chat, rng: random.Random, share: float = 0.7) -> None:
    for key in sorted(chat.planner.running):
        if rng.random() < share:
            chat.built(key, f"summary of {name(key)} " + "s" * rng.randint(0, 300))


def _files(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "chat"


def test_r22_reopening_gives_the_identical_view_byte_for_byte(folder):
    with Chat.open(folder, create=True, budget=SMALL) as chat:
        _drive(chat, 150, seed=1)
        before = chat.render_view()
        cview_before = chat.planner.cview.ordered()
    with Chat.open(folder, budget=SMALL) as chat:
        assert chat.render_view() == before
        assert chat.planner.cview.ordered() == cview_before


@pytest.mark.parametrize("seed", range(4))
def test_r24_a_lost_view_json_refolds_to_the_same_view(folder, seed):
    with Chat.open(folder, create=True, budget=SMALL) as chat:
        _drive(chat, 120, seed=seed, build_every=3)
        before = chat.render_view()
    (folder / "view.json").unlink()
    (folder / "compaction-view.json").unlink()
    with Chat.open(folder, budget=SMALL) as chat:
        assert chat.render_view() == before
        chat.verify_views()


def _fitted_down(view: str, floor: int, messages: int, text_of) -> list[str]:
    """R18/R19 written out here, not View.fit: from the rendered view (R14), merge the most
    due sibling pair whose parent is built (exact dues, the leftmost on a tie) until the
    size (R16: each line's bytes and its newline) is at most `floor` or no pair merges.
    Returns the line names ("id+n")."""
    lines = []
    for line in view.splitlines()[1:-1]:                    # between <chat> and </chat>
        head, body = line.split("|", 1)
        first, n = map(int, head.split("+"))
        lines.append((n.bit_length() - 1, first // n, len(line.encode()) + 1))
    while sum(size for _, _, size in lines) > floor:
        best = None
        for at in range(len(lines) - 1):
            (l, i, _), (l2, i2, _) = lines[at], lines[at + 1]
            text = text_of(key_of(l + 1, i // 2)) if (l2, i2) == (l, i + 1) and i % 2 == 0 else None
            if text is not None:
                due = Fraction(messages - ((i + 2) * 2**l - 1), 2**l)
                if best is None or due > best[0]:
                    best = (due, at, text)
        if best is None:
            break
        _, at, text = best
        l, i, _ = lines[at]
        head = f"{i // 2 * 2 ** (l + 1)}+{2 ** (l + 1)}|"
        body = re.sub(r"\r\n|\r|\n", " ", text)                 # R14
        lines[at : at + 2] = [(l + 1, i // 2, len((head + body).encode()) + 1)]
    return [f"{i * 2**l}+{2**l}" for l, i, _ in lines]


# A compaction floor the fit reaches with pairs left to merge, so which pairs merge first
# matters (with SMALL's 300 bytes every built pair merges, in any order).
WIDE = Budget(ceiling=6000, floor=3000, cceiling=2600, cfloor=2000, jobs=3)


def test_r24_a_lost_compaction_view_restarts_as_the_view_fitted_down(folder):
    with Chat.open(folder, create=True, budget=WIDE) as chat:
        _drive(chat, 150, seed=9)
        view = chat.render_view()
    (folder / "compaction-view.json").unlink()
    with Chat.open(folder, budget=WIDE) as chat:
        assert chat.render_view() == view
        expected = _fitted_down(view, WIDE.cfloor, chat.messages, chat.node_text)
        assert [name(key) for key in chat.planner.cview.ordered()] == expected
        assert len(expected) < len(view.splitlines()) - 2, "the fit should have merged something"


def test_r24_a_view_json_that_disagrees_with_the_merge_records_is_a_loud_error(folder):
    with Chat.open(folder, create=True, budget=SMALL) as chat:
        _drive(chat, 120, seed=3)
        chat.verify_views()
    saved = json.loads((folder / "view.json").read_text())
    assert any(l > 0 for l, _ in saved["view"]), "the history should have merged something"
    # Split the first merged line back into its two halves: a valid cover, but not what
    # the merge records fold to.
    for at, (l, i) in enumerate(saved["view"]):
        if l > 0:
            saved["view"][at : at + 1] = [[l - 1, 2 * i], [l - 1, 2 * i + 1]]
            break
    (folder / "view.json").write_text(json.dumps(saved))
    # R24 at open (issue 8): every opening refuses it, naming the file; nothing is written.
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    for writer in (False, True):
        with pytest.raises(CorruptRecord, match="view.json: byte 0: view.json disagrees"):
            Chat.open(folder, writer=writer, budget=SMALL)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != "writer.lock"} == {
        p: b for p, b in before.items() if p.name != "writer.lock"}


def test_r22_messages_logged_but_never_planned_are_planned_at_open(folder):
    """A crash after the message's fsync and before the planner saved anything."""
    with Chat.open(folder, create=True, budget=SMALL) as chat:
        _drive(chat, 60, seed=4)
    store = ChatStore.open(folder)
    for n in range(5):
        store.append_message("user", f"logged while the planner was down {n}")
    store.close()
    with Chat.open(folder, budget=SMALL) as chat:
        assert chat.messages == 65
        assert chat.view_lines()[-1] == "64+1|user: logged while the planner was down 4"
        after = chat.render_view()
    with Chat.open(folder, budget=SMALL) as chat:
        assert chat.render_view() == after


def test_r5_read_only_open_writes_nothing_even_when_it_has_to_recover(folder):
    with Chat.open(folder, create=True, budget=SMALL) as chat:
        _drive(chat, 40, seed=5)
    store = ChatStore.open(folder)
    store.append_message("user", "not planned yet")
    store.close()
    (folder / "compaction-view.json").unlink()
    before = _files(folder)
    with Chat.open(folder, writer=False, budget=SMALL) as chat:
        assert chat.messages == 41
        chat.render_view()
        with pytest.raises(PermissionError):
            chat.add("user", "no")
    assert _files(folder) == before


def test_r35_zoom_returns_the_two_halves_and_messages_whole(folder):
    with Chat.open(folder, create=True) as chat:
        chat.add("user", "first words")
        chat.add("everchat", "a reply")
        chat.add("user", "third " + "x" * 600)
        assert chat.zoom(0, 2) == "0+1|user: first words\n1+1|everchat: a reply"
        assert chat.zoom(0, 1) == "user: first words"
        assert chat.zoom(2, 1).startswith("user: third xxx")
        chat.add("user", "fourth")
        assert chat.zoom(2, 2) == "2+1|(not summarized yet: zoom it)\n3+1|user: fourth"
        chat.built(key_of(0, 2), "the third message, summarized")
        assert chat.zoom(2, 2) == "2+1|the third message, summarized\n3+1|user: fourth"


@pytest.mark.parametrize("first, count, words", [
    (6, 4, "No line 6+4. id must be a multiple of n, at least 0."),
    (1, 2, "No line 1+2. id must be a multiple of n, at least 0."),
    (0, 3, "No line 0+3. n must be a power of two: 1, 2, 4, 8 …"),
    (0, 0, "No line 0+0. n must be a power of two: 1, 2, 4, 8 …"),
    (-1, 1, "No line -1+1. id must be a multiple of n, at least 0."),
    (4, 1, "No line 4+1. The chat has 4 messages (ids 0 to 3)."),
    (0, 8, "No line 0+8. The chat has 4 messages (ids 0 to 3)."),
])
def test_r35_zoom_of_a_line_that_does_not_exist_is_a_clear_error(folder, first, count, words):
    """The words are the model's tool's (`MemoryTools`): one zoom for the CLI, /zoom and the model."""
    with Chat.open(folder, create=True) as chat:
        for n in range(4):
            chat.add("user", f"message {n}")
        with pytest.raises(ZoomError) as error:
            chat.zoom(first, count)
        assert str(error.value) == words


def test_r35_date_of_a_message_that_does_not_exist_names_the_ids_there_are(folder):
    with Chat.open(folder, create=True) as chat:
        with pytest.raises(ZoomError) as error:
            chat.date(0)
        assert str(error.value) == "No message 0: the chat has no messages yet."
        chat.add("user", "only one")
        with pytest.raises(ZoomError) as error:
            chat.date(1)
        assert str(error.value) == "No message 1: the chat has 1 message (id 0)."


def test_r35_a_long_message_is_zoomed_in_pages_of_16000_bytes(folder):
    with Chat.open(folder, create=True) as chat:
        text = "é" * 7990 + "z" * 30  # 16,010 bytes: R8 splits it into two messages
        ids, _ = chat.add("user", text)
        assert len(ids) == 2
        # The first part is 16,000 bytes of text, so its line "user: …" takes two pages.
        first = chat.zoom(ids[0], 1)
        assert first.endswith(f"\n(page 1 of 2: zoom({ids[0]}, 1, page=2) for the rest)")
        page_one = first.rsplit("\n", 1)[0]
        assert len(page_one.encode()) <= 16_000
        whole = page_one + chat.zoom(ids[0], 1, page=2) + chat.zoom(ids[1], 1).removeprefix("user: ")
        assert whole == "user: " + text
        with pytest.raises(ZoomError, match="has 2 pages, not page 9"):
            chat.zoom(ids[0], 1, page=9)


def test_the_cli_reads_a_chat_without_the_lock(folder, capsys):
    from everchat.frontends.cli.main import main

    assert main(["note", "remember amber-42", "--data-dir", str(folder)]) == 0
    with Chat.open(folder):  # the writer holds the lock; readers still work
        assert main(["--data-dir", str(folder), "view"]) == 0
        assert "0+1|note: remember amber-42" in capsys.readouterr().out
        assert main(["status", "--data-dir", str(folder)]) == 0
        assert json.loads(capsys.readouterr().out)["messages"] == 1
        assert main(["zoom", "0", "2", "--data-dir", str(folder)]) == 2  # wrong arguments (issue 5)
        assert "No line 0+2. The chat has 1 message (id 0)." in capsys.readouterr().err
        assert main(["check", "--data-dir", str(folder)]) == 0
    empty = folder.parent / "empty"
    empty.mkdir()
    assert main(["view", "--data-dir", str(empty)]) == 1
    assert "everchat:" in capsys.readouterr().err
    shutil.rmtree(empty)
