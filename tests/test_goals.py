"""The goals' pure core (issue 13, actors/turns/goals.py): the check's answer, the turn counter,
pausing, halting, resuming after a restart, and goal.json through the log writer's store path."""

from __future__ import annotations

import json

import pytest

from everchat.actors.turns.goals import (CHECK_CHARS, CONTINUE, GOAL_NAME, MET, TURN_LIMIT, Goal, GoalBook, check_text,
                                   is_met, load_goal, save_goal)
from everchat.actors.session.local import open_writer_store
from everchat.actors.folder import CorruptRecord


@pytest.mark.parametrize("answer", ["Goal met.", "goal met.", "  GOAL   MET.  ", "\nGoal met. All tests pass.",
                                    "Goal met", "Goal met!"])
def test_an_answer_that_starts_with_goal_met_is_met(answer):
    assert is_met(answer)


@pytest.mark.parametrize("answer", ["", "Not met: the tests fail.", "The goal is met.", "Goal met? No.",
                                    "Goal metric missing.", "Goal not met.", "I think: Goal met."])
def test_anything_else_is_not_met(answer):
    assert not is_met(answer)


def test_a_goal_runs_checks_and_continues_until_met():
    book = GoalBook()
    assert book.set("  Make the tests pass. ").goal == Goal("Make the tests pass.")
    assert book.turn_started().goal.running
    step = book.turn_ended("done")
    assert step.action == "check" and step.goal == Goal("Make the tests pass.", turns=1)
    assert book.checked("Not met: two tests fail.").action == "continue"
    book.turn_started()
    assert book.turn_ended("round_limit").action == "check"  # a turn cut by its tool rounds goes on too
    assert book.checked("Not met.").action == "continue"
    book.turn_started()
    book.turn_ended("done")
    step = book.checked("Goal met.")
    assert (step.action, step.goal, step.detail, book.goal) == ("met", None, MET, None)


def test_the_goal_pauses_after_its_limit_of_turns_in_a_row_and_the_person_resumes_it():
    book = GoalBook(limit=3)
    book.set("Never done.")
    actions = []
    for _ in range(3):
        book.turn_started()
        assert book.turn_ended("done").action == "check"
        actions.append(book.checked("Not met.").action)
    assert actions == ["continue", "continue", "pause"]
    assert book.goal.state == "paused" and book.goal.detail == "3 turns in a row without a word from you"
    assert book.turn_ended("done").action == "none"  # a paused goal checks nothing
    step = book.person_spoke()
    assert step.detail == "resumed" and book.goal.state == "active" and book.goal.turns == 0
    book.turn_started()
    book.turn_ended("done")
    assert book.checked("Not met.").action == "continue"  # counted afresh from the person's word


def test_the_person_writing_resets_the_count():
    book = GoalBook(limit=2)
    book.set("X.")
    book.turn_ended("done")
    book.person_spoke()
    book.turn_ended("done")
    assert book.checked("Not met.").action == "continue"
    assert book.goal.turns == 1


def test_the_default_limit_is_30():
    assert TURN_LIMIT == 30 and GoalBook().limit == 30


@pytest.mark.parametrize("reason, why", [("stopped", "the turn was stopped"), ("error", "the turn ended with error")])
def test_a_stopped_or_failed_turn_pauses_the_goal(reason, why):
    book = GoalBook()
    book.set("X.")
    step = book.turn_ended(reason)
    assert step.action == "pause" and step.detail == why and book.goal.state == "paused"


def test_a_failed_check_pauses_and_never_continues():
    book = GoalBook()
    book.set("X.")
    book.turn_ended("done")
    step = book.check_failed("APIError: 500")
    assert step.action == "pause" and step.detail == "the goal check failed: APIError: 500"


def test_an_empty_answer_is_a_failed_check_that_pauses():
    book = GoalBook()
    book.set("X.")
    book.turn_ended("done")
    step = book.checked("  \n")
    assert step.action == "pause" and step.detail == "the goal check gave no answer"


def test_halt_drops_the_goal_and_a_late_check_changes_nothing():
    book = GoalBook()
    book.set("X.")
    book.turn_ended("done")
    assert book.halt().detail == "Goal dropped."
    assert book.checked("Not met.").action == "none" and book.goal is None
    assert book.turn_ended("done").action == "none"
    assert book.halt().detail == "No goal to drop."


def test_a_new_goal_replaces_the_old_and_an_empty_one_is_refused():
    book = GoalBook()
    book.set("A.")
    book.turn_ended("done")
    assert book.set("B.").goal == Goal("B.")
    with pytest.raises(ValueError, match="/goal TEXT"):
        book.set("  ")


def test_after_a_restart_a_goal_between_turns_checks_again_and_one_cut_mid_turn_waits():
    between = GoalBook(Goal("X.", turns=2))
    assert between.restarted().action == "check"
    cut = GoalBook(Goal("X.", turns=2, running=True))
    step = cut.restarted()
    assert step.action == "pause" and step.goal == Goal("X.", "paused", 2, False, "Everchat stopped during a goal turn")
    paused = GoalBook(Goal("X.", "paused", 30, detail="30 turns in a row without a word from you"))
    assert paused.restarted().action == "none" and paused.goal.state == "paused"
    assert GoalBook().restarted().action == "none"


def test_the_check_sees_the_goal_and_the_latest_turn_cut_to_size():
    text = check_text("Ship it.", [("user", CONTINUE), ("everchat", "x" * (CHECK_CHARS * 3)), ("tool", "shell {}")])
    assert text.startswith("<goal>\nShip it.\n</goal>\n\n<latest-turn>\nuser: The goal isn't met yet")
    assert "characters cut" in text and text.endswith("tool: shell {}\n</latest-turn>\n\nIs the goal fully met?")
    assert len(text) < CHECK_CHARS * 2
    many = check_text("G.", [("echo", "y" * CHECK_CHARS)] * 20)
    assert "[… the turn's start is cut …]" in many and len(many) < 30000


def test_goal_json_round_trips_through_the_store_path(tmp_path):
    store = open_writer_store(tmp_path / "chat", create=True)  # as the log writer opens it
    try:
        assert load_goal(store.path) is None
        goal = Goal("Make the tests pass.", "paused", 7, False, "the turn was stopped")
        save_goal(store.path, goal)
        assert load_goal(store.path) == goal
        record = json.loads((store.path / GOAL_NAME).read_text())
        assert record == {"version": 1, "text": "Make the tests pass.", "state": "paused", "turns": 7,
                          "running": False, "detail": "the turn was stopped"}
        assert not [p for p in store.path.iterdir() if ".tmp." in p.name]  # replaced atomically
        save_goal(store.path, None)
        assert load_goal(store.path) is None and not (store.path / GOAL_NAME).exists()
        save_goal(store.path, None)  # nothing to remove: fine
    finally:
        store.close()


@pytest.mark.parametrize("content", ["not json", '{"version": 2, "text": "x", "state": "active", "turns": 0}',
                                     '{"version": 1, "text": "", "state": "active", "turns": 0}',
                                     '{"version": 1, "text": "x", "state": "odd", "turns": 0}',
                                     '{"version": 1, "text": "x", "state": "active", "turns": true}'])
def test_a_goal_file_that_is_not_one_is_a_corrupt_record_naming_it(tmp_path, content):
    (tmp_path / GOAL_NAME).write_text(content)
    with pytest.raises(CorruptRecord, match=GOAL_NAME):
        load_goal(tmp_path)
