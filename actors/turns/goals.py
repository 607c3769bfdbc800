"""Goals (issue 13): `/goal TEXT` keeps the chat working until a check says the goal is met.

Pure: no sockets, no threads. The turn runner actor (actors/turns/actor.py) holds one
`GoalBook` and asks it what to do at each step; tests drive it directly.

The loop, as the book sees it:
- `set(text)`: a new goal (it replaces any other), active, no turns yet. Its text is sent
  as the person's message (a turn, or input joining the running one, R36).
- `turn_started()` / `turn_ended(reason)`: every turn while a goal is on counts. A turn
  that ended "done" or "round_limit" asks for a check; one that was stopped by the person
  or failed pauses the goal (it never loops on a failing model).
- `checked(answer)`: the check's answer (see `CHECK_SYSTEM`). `is_met(answer)`: it starts
  with "Goal met." (case and whitespace tolerant): the goal ends. Anything else: the next
  turn starts with `CONTINUE`, unless `limit` turns ran in a row since the goal was set or
  the person last wrote: then the goal pauses and waits for the person.
  `check_failed(error)`: pauses, with the error said; so does an empty answer.
- `person_spoke()`: any message of the person's while a goal is on resets the count and
  resumes a paused goal (their message's turn is checked like any other).
- `halt()`: drops the goal.
- `restarted()`: the goal as saved when the chat starts again: a goal whose turn was
  running when Everchat stopped pauses (a demanding user would not want a crashed turn
  repeated unasked); one saved between turns asks for its check again and goes on.
- `restored(goal)`: the goal as `everchat restore` writes it from a backup: always paused
  (`RESTORED`), so a restored chat never starts working on its own on another machine.

The goal lives in the chat folder as `goal.json` (written by the log writer, the chat
folder's one writer: `SaveGoal`, atomically like `draft.json`), removed when the goal ends:

    {"version": 1, "text": "…", "state": "active", "turns": 3, "running": false, "detail": ""}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from everchat.actors.folder import CorruptRecord
from everchat.actors.folder._files import atomic_write, fsync_dir, read_small

__all__ = ["CHECK_MAX_TOKENS", "CHECK_SYSTEM", "CONTINUE", "GOAL_NAME", "GOAL_VERSION", "Goal", "GoalBook",
           "MET", "RESTORED", "TURN_LIMIT", "check_text", "is_met", "load_goal", "restored", "save_goal"]

GOAL_NAME = "goal.json"
GOAL_VERSION = 1

TURN_LIMIT = 30
"""Goal turns in a row (without a word from the person) before the goal pauses."""

CONTINUE = "The goal isn't met yet: keep working."
"""The message that starts the next turn, logged as `user` with meta {"goal": "continue"}."""

MET = "Goal met."

RESTORED = "restored from a backup"
"""Why a restored goal is paused (`restored`)."""

CHECK_MAX_TOKENS = 512
"""The check's answer is one short line; the rest is room for a reasoning model's own
thinking (OpenAI counts it in the limit). An empty answer is a failed check."""

CHECK_CHARS = 4000
"""The goal and each message of the turn the check reads are cut to this many characters
(head and tail), and the turn's messages together to `CHECK_TOTAL` characters: the check
stays cheap, and at most 4 bytes a character it stays within the view's ceiling (issue 20,
P2: no request carries more than the ceiling, 128,000 bytes)."""
CHECK_TOTAL = 24000

CHECK_SYSTEM = (
    "You check whether a goal is met. You get the goal and the latest turn of a chat between "
    "a person and an assistant working on it (the person's message, the assistant's replies, "
    "its tool calls and their results). If the chat shows the goal fully met, answer exactly "
    "\"Goal met.\" and nothing else. Otherwise answer \"Not met:\" and, in one short sentence, "
    "what is still missing."
)


def is_met(answer: str) -> bool:
    """The check's answer says the goal is met: it starts with "Goal met." (case and
    whitespace tolerant; the period may be missing only at the very end)."""
    words = " ".join(answer.split()).lower()
    if not words.startswith("goal met"):
        return False
    rest = words[len("goal met"):]
    return rest == "" or rest[0] in ".!"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters cut …]\n{text[-half:]}"


def check_text(goal: str, messages: list[tuple[str, str]]) -> str:
    """The check's one user message: the goal (cut to `CHECK_CHARS`, head and tail: a goal
    pasted whole once sent the check far over the ceiling, issue 20), then the latest
    turn's messages as `kind: text` (each cut to `CHECK_CHARS`, the whole to `CHECK_TOTAL`,
    keeping the end). At most 4 × (4,000 + 24,000) bytes and the marks: within the ceiling."""
    lines = [_cut(f"{kind}: {text}", CHECK_CHARS) for kind, text in messages]
    body = "\n\n".join(lines) or "(the turn logged nothing)"
    if len(body) > CHECK_TOTAL:
        body = "[… the turn's start is cut …]\n" + body[-CHECK_TOTAL:]
    return (f"<goal>\n{_cut(goal, CHECK_CHARS)}\n</goal>\n\n<latest-turn>\n{body}\n</latest-turn>\n\n"
            f"Is the goal fully met?")


@dataclass(frozen=True)
class Goal:
    """The chat's goal. `state`: "active" or "paused" (waiting for the person); `turns`:
    turns in a row since it was set or the person last wrote; `running`: a turn was on
    when it was saved; `detail`: why it paused."""

    text: str
    state: str = "active"
    turns: int = 0
    running: bool = False
    detail: str = ""

    def to_record(self) -> dict:
        return {"version": GOAL_VERSION, **asdict(self)}

    @classmethod
    def from_record(cls, record: object, where: str = "goal") -> "Goal":
        if not isinstance(record, dict) or record.get("version") != GOAL_VERSION:
            raise ValueError(f"{where}: not a version {GOAL_VERSION} goal")
        text, state, turns = record.get("text"), record.get("state"), record.get("turns")
        running, detail = record.get("running", False), record.get("detail", "")
        if (not isinstance(text, str) or not text.strip() or state not in ("active", "paused")
                or not isinstance(turns, int) or isinstance(turns, bool) or turns < 0
                or not isinstance(running, bool) or not isinstance(detail, str)):
            raise ValueError(f"{where}: a goal needs a text, a state (active or paused), a turn count")
        return cls(text, state, turns, running, detail)


@dataclass(frozen=True)
class Step:
    """What the actor does next: `action` is "check", "continue", "met", "pause" or
    "none"; `goal` the goal after the step (None once it ended); `detail` words for the person."""

    action: str
    goal: Goal | None
    detail: str = ""


class GoalBook:
    """The chat's one goal and its counter. Every method returns a `Step`; the actor saves
    `goal` (when it changed) and does the action."""

    def __init__(self, goal: Goal | None = None, limit: int = TURN_LIMIT) -> None:
        if limit < 1:
            raise ValueError("the turn limit is at least 1")
        self.goal = goal
        self.limit = limit

    def _step(self, action: str, goal: Goal | None, detail: str = "") -> Step:
        self.goal = goal
        return Step(action, goal, detail)

    def set(self, text: str) -> Step:
        text = text.strip()
        if not text:
            raise ValueError("a goal needs its text: /goal TEXT")
        return self._step("none", Goal(text))

    def halt(self) -> Step:
        had = self.goal
        return self._step("none", None, "Goal dropped." if had else "No goal to drop.")

    def person_spoke(self) -> Step:
        if self.goal is None:
            return Step("none", None)
        resumed = self.goal.state == "paused"
        return self._step("none", replace(self.goal, state="active", turns=0, detail=""),
                          "resumed" if resumed else "")

    def turn_started(self) -> Step:
        if self.goal is None or self.goal.state != "active":
            return Step("none", self.goal)
        return self._step("none", replace(self.goal, running=True))

    def turn_ended(self, reason: str) -> Step:
        if self.goal is None:
            return Step("none", None)
        goal = replace(self.goal, running=False, turns=self.goal.turns + 1)
        if goal.state != "active":
            return self._step("none", goal)
        if reason in ("done", "round_limit"):
            return self._step("check", goal)
        why = "the turn was stopped" if reason == "stopped" else f"the turn ended with {reason}"
        return self._pause(goal, why)

    def checked(self, answer: str) -> Step:
        if self.goal is None or self.goal.state != "active":
            return Step("none", self.goal)  # halted or paused meanwhile
        if not answer.strip():  # e.g. a reasoning model that spent the limit thinking
            return self._pause(self.goal, "the goal check gave no answer")
        if is_met(answer):
            return self._step("met", None, MET)
        if self.goal.turns >= self.limit:
            return self._pause(self.goal, f"{self.goal.turns} turns in a row without a word from you")
        return self._step("continue", self.goal, " ".join(answer.split())[:300])

    def check_failed(self, error: str) -> Step:
        if self.goal is None or self.goal.state != "active":
            return Step("none", self.goal)
        return self._pause(self.goal, f"the goal check failed: {error}")

    def restarted(self) -> Step:
        """At the chat's start, with the goal as saved."""
        if self.goal is None or self.goal.state != "active":
            return Step("none", self.goal)
        if self.goal.running:
            return self._pause(replace(self.goal, running=False), "Everchat stopped during a goal turn")
        return Step("check", self.goal)

    def _pause(self, goal: Goal, why: str) -> Step:
        return self._step("pause", replace(goal, state="paused", detail=why), why)


def restored(goal: Goal) -> Goal:
    """The goal a backup carried, as the restored chat gets it: paused, whatever it was, so
    the restored chat (often on another machine, with other tools and keys) does no work
    until the person says so; its reason says it was restored, and keeps why it was paused
    before, if it was. Its text and count stay; any word of the person's resumes it."""
    detail = RESTORED if goal.state == "active" else f"{RESTORED}; it was paused: {goal.detail or 'waiting for you'}"
    return replace(goal, state="paused", running=False, detail=detail)


# --- the file (written by the log writer only, and by `everchat restore` in its new folder) --


def save_goal(chat: Path, goal: Goal | None) -> None:
    """Replace `goal.json` (R4's atomic replace); None removes it."""
    path = Path(chat) / GOAL_NAME
    if goal is None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
        return
    atomic_write(path, (json.dumps(goal.to_record(), ensure_ascii=False) + "\n").encode())


def load_goal(chat: Path) -> Goal | None:
    """The saved goal, or None. A file that is not a goal raises CorruptRecord naming it."""
    path = Path(chat) / GOAL_NAME
    data = read_small(path)
    if data is None:
        return None
    try:
        return Goal.from_record(json.loads(data), str(path))
    except (ValueError, RecursionError) as error:
        raise CorruptRecord(path, 0, f"not a goal: {error}") from None
