"""/goal and /halt in the terminal chat (issue 13): the real prompt_toolkit application on a
pipe input over the real ChatSession and the fake model server."""

from __future__ import annotations

from terminal_world import running

from everchat.actors import settings as config
from everchat.actors.session.session import ChatSession
from everchat.tools.fakemodel import FakeModelServer, Gate, Reply, Text


def settings_for(home, server):
    flags = {"reply.provider": "anthropic", "reply.model": "claude-test", "reply.base_url": server.base_url,
             "compaction.provider": "demo"}
    return config.load(flags, env={"ANTHROPIC_API_KEY": "test-key"}, home=home)


def test_goal_shows_its_lines_until_met_and_halt_drops_the_next_one(tmp_path):
    gate = Gate()
    checks = ["Not met: one more step.", "Goal met.", Reply(Text("Not met."), gate=gate)]

    def rule(request):
        if not request.tool_names:  # the goal's check
            answer = checks.pop(0)
            return answer if isinstance(answer, Reply) else Reply(Text(answer))
        return Reply(Text("Working."))

    with FakeModelServer() as server:
        server.rule(rule)
        session = ChatSession.open(settings_for(tmp_path, server))
        try:
            with running(session, columns=200) as chat:
                chat.line("/goal Tidy the notes.")
                chat.wait_printed("◎ goal: Tidy the notes. — working until a check finds it met (/halt drops it)")
                chat.wait_printed("◎ The goal isn't met yet: keep working. (the check: Not met: one more step.)")
                chat.wait_printed("◎ Goal met. (Tidy the notes., 2 turns)")
                assert "› Tidy the notes." in chat.terminal.printed
                chat.line("/goal")
                chat.wait_printed("no goal: /goal TEXT sets one")
                chat.line("/goal Sort the files.")
                chat.wait_printed("◎ goal: Sort the files.")
                chat.wait(lambda t: not checks, "the second goal's check on its way")
                chat.line("/goal")
                chat.wait_printed("◎ goal (1 turns in a row so far; /halt drops it): Sort the files.")
                chat.line("/halt")
                chat.wait_printed("◎ Goal dropped. (Sort the files.)")
                gate.open()
                chat.line("/halt")
                chat.wait_printed("no goal to drop")
                assert not any("Sort the files." in line and "isn't met" in line for line in chat.terminal.printed)
                chat.line("/help goal")
                chat.wait_printed("/goal [TEXT]  send TEXT and keep working")
                chat.line("/quit")
                assert chat.exit_code() == 0
        finally:
            session.close()


def test_a_paused_goal_is_shown_when_the_chat_opens_again(tmp_path):
    from everchat.actors.turns.goals import Goal, save_goal

    with FakeModelServer() as server:
        settings = settings_for(tmp_path, server)
        ChatSession.open(settings).close()  # the chat exists
        save_goal(settings.chat_dir, Goal("Ship it.", "paused", 30, False, "30 turns in a row without a word from you"))
        session = ChatSession.open(settings)
        try:
            with running(session, columns=200) as chat:
                chat.wait_printed("◎ goal (paused: 30 turns in a row without a word from you; send a message to go "
                                  "on, /halt drops it): Ship it.")
                chat.line("/quit")
                assert chat.exit_code() == 0
        finally:
            session.close()


def test_goal_halt_and_a_failing_after_turn_command_in_tmux(tmp_path):
    """The real `everchat` in a real terminal (tmux): the demo's goal is met after one turn,
    the after-turn command's failure is its own line, and /halt then has nothing to drop."""
    import sys
    from pathlib import Path

    from tmux_world import clean_env, tmux_pane

    everchat = Path(sys.executable).with_name("everchat")
    with tmux_pane(clean_env(tmp_path / "home")) as pane:
        pane.start(str(everchat), "--demo", "--after-turn", "echo hook-said-no; exit 3")
        pane.wait("· demo")
        pane.type("/goal Remember amber-42.")
        pane.wait("◎ Goal met. (Remember amber-42., 1 turn)", idle=True)
        screen = pane.wait("✗ after turn 0: the after-turn command failed (exit code 3):")
        assert "hook-said-no" in screen and "◎ goal: Remember amber-42." in screen
        pane.type("/halt")
        pane.wait("no goal to drop")
        pane.keys("C-d")
        pane.wait("[exit 0]")
