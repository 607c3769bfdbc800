"""The mutants of tools/mutants.py: one rule of SPEC.md broken by a one-line change each.

Every mutant names the tests that must catch it (pytest node ids, small and fast ones:
the whole catalogue runs in a few minutes on two cores). The catalogue holds the 13
mutants the tool started with, the 24 of the tests review (reviews/tests-2026-12-03.md,
section 2b; its #12b is #12 with another selection), the R25 mutant of the spec review,
and one for each further rule a one-line change can break: R1 (keys), R2-R5, R7-R25,
R27-R31, R33, R35-R37, R40, R41, R44 and R51 have at least one. Rules without one: R6/R48
(thoughts never reach the store: there is no line that logs them to flip), R26/R34/R45/R49
(prompt and request wording, pinned word for word by test_prompt and test_compaction_wire),
R32/R52 (no scan exists to put back), R38/R39 (not built), R42/R50 (covered by the restart
and refold mutants: nothing rebuilds the view by another rule), R43/R46 (mistakes with
no line of their own: R46's cut is `r29-final-cut-513`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mutant", "MUTANTS"]


@dataclass(frozen=True)
class Mutant:
    name: str
    law: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


LAWS = "tests/test_memory_laws.py::test_r13_r17_r18_r19_r21_r25_r27_r31_laws_hold_over_random_histories"
RESTART = "tests/test_memory_laws.py::test_r24_restart_gives_the_same_view_also_mid_batch"
SHRINK_RESTART = "tests/test_memory_laws.py::test_r19_r24_a_restart_in_the_middle_of_a_shrinking_batch_keeps_it_going"
EXAMPLES = "tests/test_memory_examples.py"
PUSH = EXAMPLES + "::test_r20_push_agreement_at_every_step_up_to_20000"
BRIDGE = "tests/test_scenario_bridge.py"
WAIT = "tests/test_planner_wait.py"
FAILURES = "tests/test_planner_failures.py"
COMPACTION = "tests/test_compaction.py"
STORE_API = "tests/test_store_api.py"
RECORDS = "tests/test_store_records.py"
RECOVERY = "tests/test_store_recovery.py"
CHAT = "tests/test_chat.py"
TURNS = "tests/test_turns.py"
GATE = "tests/test_prefix_gate.py"

M = Mutant
MUTANTS = (
    # -- the tool's first 13 -------------------------------------------------------------
    M("r40-age-from-first-message", "R18/R40 merge order: due measured from the pair's last message",
      "actors/tree/_view.py",
      "due = (messages - (up >> LEVEL_BITS) - (1 << l) + 1) << (_DUE_SHIFT - l + 1)",
      "due = (messages - (up >> LEVEL_BITS)) << (_DUE_SHIFT - l + 1)", (LAWS, PUSH)),
    M("tie-goes-right", "R18: on equal due the leftmost pair wins", "actors/tree/_view.py",
      "return (-due, up)", "return (-due, -up)", (LAWS,)),
    M("r41-merge-at-every-message", "R17/R19/R41: a message with no batch only appends its line",
      "actors/tree/_planner.py", "if view.size > budget.ceiling or view.shrinking:", "if True:", (LAWS,)),
    M("merge-unbuilt-parent", "R18: only pairs whose parent is built merge", "actors/tree/_view.py",
      "                    if grand in raw:\n", "                    if True:\n", (LAWS,)),
    M("batch-stops-early", "R19: a batch ends at or under the floor unless no pair can merge",
      "actors/tree/_view.py", "while size > floor and heap:", "while size > floor and heap and len(merged) < 1:",
      (LAWS,)),
    M("cover-loses-a-half", "R13: the view covers every message once", "actors/tree/_view.py",
      "                members.discard(right)\n", "", (LAWS,)),
    M("context-passes-unbuilt-line", "R27/R44: a context stops at its first unbuilt line",
      "actors/tree/_planner.py",
      "        if self.pending and self.pending[0] < cut:\n            cut = self.pending[0]\n",
      "", (LAWS,)),
    M("cview-ignores-shrinking", "R21: the compaction view is fitted while it is still shrinking",
      "actors/tree/_planner.py", "if cview.size > budget.cceiling or cview.shrinking:",
      "if cview.size > budget.cceiling:", (LAWS,)),
    M("restart-forgets-shrinking", "R19/R24: a restart keeps a shrinking batch going", "actors/tree/_planner.py",
      "planner.view.load(keys, shrinking, tree)", "planner.view.load(keys, False, tree)", (SHRINK_RESTART, RESTART)),
    M("refold-ignores-records", "R24/R25: a lost view.json refolds from the merge records",
      "actors/tree/_refold.py", "        del by_first[start(right)]\n        by_first[start(left)] = up\n", "",
      (RESTART,)),
    M("free-parent-over-512", "R11: two halves join freely only when they fit in 512 bytes",
      "actors/tree/_tree.py", "if joined > LINE_LIMIT:", "if joined > LINE_LIMIT + 64:", (LAWS,)),
    M("torn-tail-not-terminated", "R2: a torn last line is terminated before the next append",
      "actors/folder/_daylog.py", '            write_all(fd, b"\\n")\n', "            pass\n",
      (RECOVERY + "::test_r2_torn_last_line_is_skipped_and_terminated",)),
    M("leaf-window-9", "R31: a leaf starts once fewer than 8 lines before it are unbuilt",
      "actors/tree/_planner.py", "_LEAF_WINDOW = 8\n", "_LEAF_WINDOW = 9\n",
      (EXAMPLES + "::test_r31_a_leaf_waits_while_8_lines_before_it_are_unbuilt",)),
    # -- the tests review, section 2b (#1-#24; #12b is #12 with another selection) ----------
    M("r18-due-off-by-one", "R18: due = (T - last) / 2^l, last the pair's last message", "actors/tree/_view.py",
      "- (1 << l) + 1) << (_DUE_SHIFT - l + 1)", "- (1 << l)) << (_DUE_SHIFT - l + 1)", (LAWS, PUSH)),
    M("r19-floor-inclusive", "R19: a batch merges until the size is at most the floor", "actors/tree/_view.py",
      "while size > floor and heap:", "while size >= floor and heap:", (LAWS,)),
    M("r19-ceiling-inclusive", "R19: a batch runs when the view is larger than the ceiling",
      "actors/tree/_planner.py", "if view.size > budget.ceiling or view.shrinking:",
      "if view.size >= budget.ceiling or view.shrinking:", (LAWS,)),
    M("r11-512-bytes-not-free", "R11: a line of at most 512 bytes is its own leaf", "actors/tree/_planner.py",
      "if line_bytes <= LINE_LIMIT:", "if line_bytes < LINE_LIMIT:", (EXAMPLES, LAWS)),
    M("r30-retry-highest-level-first", "section 8 (1): failed merges rejoin the queue lower level first",
      "actors/tree/_planner.py", "if level(key)), key=lambda key: (level(key), start(key))",
      "if level(key)), key=lambda key: (-level(key), start(key))", (BRIDGE,)),
    M("r30-failed-leaf-restarts-at-once", "R30: a failed call is tried again at the next message",
      "actors/tree/_planner.py",
      "            if key not in running and key not in failed:\n                return key",
      "            if key not in running:\n                return key",
      (EXAMPLES + "::test_r31_a_leaf_waits_while_8_lines_before_it_are_unbuilt",)),
    M("r31-turn-wait-ignored", "R31: while a turn waits, only the lines before its message start",
      "actors/tree/_planner.py", "        if self.waiting_for >= 0:\n            self._start_for_turn(started)\n"
      "            return\n", "", (WAIT,)),
    M("r29-six-tries", "R29: at most five tries", "actors/compactor/compaction.py", "MAX_TRIES = 5", "MAX_TRIES = 6",
      (COMPACTION,)),
    M("r29-stop-only-when-longer", "R29: a follow-up that is not shorter ends the tries", "actors/compactor/compaction.py",
      "size >= len(self.best.encode())", "size > len(self.best.encode())", (COMPACTION,)),
    M("r47-no-fuller-line", "R47: a line far under 512 bytes is asked again when there was more to say",
      "actors/compactor/compaction.py", "SHORT_LINE = LINE_LIMIT // 4", "SHORT_LINE = 0", (COMPACTION,)),
    M("r47-fuller-line-at-any-input", "R47: only an input with more than a line's worth is asked again",
      "actors/compactor/compaction.py", "> LINE_LIMIT\n", ">= 0\n", (COMPACTION,)),
    M("r23-view-mark-one-block-late", "R23: a cache mark on the last whole block of the view",
      "actors/compactor/compaction.py", "cache=k == mark - 1 or", "cache=k == mark or", (COMPACTION,)),
    M("r30-failure-cap-4", "R30: the third failed call builds the node from its input", "actors/compactor/compaction.py",
      "FAILURE_CAP = 3", "FAILURE_CAP = 4", (FAILURES,)),
    M("r4-append-no-fsync", "R4/R51: every record is one write and one fsync", "actors/folder/_daylog.py",
      "        write_all(self._fd, data)\n        os.fsync(self._fd)\n", "        write_all(self._fd, data)\n",
      (STORE_API + "::test_r4_a_single_append_is_one_write_and_one_fsync",)),
    M("r4-new-day-folder-not-fsynced", "R4: a new day file also fsyncs its folder", "actors/folder/_daylog.py",
      "            if is_new:\n                fsync_dir(self.folder)\n",
      "            if is_new:\n                pass\n",
      (STORE_API + "::test_r4_a_new_day_file_also_fsyncs_its_folder",)),
    M("r4-atomic-write-no-fsync", "R4/R22: a replaced file is fsynced before its rename", "actors/folder/_files.py",
      "        write_all(fd, data)\n        os.fsync(fd)\n", "        write_all(fd, data)\n",
      (STORE_API + "::test_r22_save_views_replaces_the_files_by_rename_and_fsyncs",)),
    M("key-ignored", "R1: an append's key makes a resend idempotent", "actors/folder/_store.py",
      "known = self._lookup_key(p.key)", "known = None", (STORE_API + "::test_a_resent_append_is_logged_once",)),
    M("key-cache-not-updated", "R1: a key is known from the write on", "actors/folder/_store.py",
      "        if self._keys is not None:\n            for digest, first, count in keys:",
      "        if False:\n            for digest, first, count in keys:", (STORE_API,)),
    M("r7-clip-at-30000", "R7: an echo of 30,000 characters is kept whole", "actors/folder/_records.py",
      "if len(text) <= 2 * keep:", "if len(text) < 2 * keep:", (RECORDS,)),
    M("r8-part-one-byte-over", "R8: parts of at most 16,000 bytes", "actors/folder/_records.py",
      "end = start + limit", "end = start + limit + 1", (RECORDS,)),
    M("mailbox-bound-plus-one", "transport: a mailbox holds at most its bound", "transport/_mailbox.py",
      "if q.qsize() < self.bound:", "if q.qsize() <= self.bound:", ("tests/test_transport_local.py",)),
    M("tool-rounds-plus-one", "a turn ends after its tool-round limit", "actors/turns/turn.py",
      "if rounds >= self.tool_rounds:", "if rounds > self.tool_rounds:",
      (TURNS + "::test_the_round_limit_ends_the_turn_with_a_note",)),
    M("recovery-order-views-first", "R24/R25: merge records reach the disk before the views",
      "actors/planner/planning.py",
      "        for step in steps:\n            self._save_record(step)\n"
      "        if steps:\n            self._save_views()\n",
      "        if steps:\n            self._save_views()\n"
      "        for step in steps:\n            self._save_record(step)\n",
      ("tests/test_recovery_order.py",)),
    M("r23-cache-entries-live-an-hour", "R23: five-minute cache entries, no 1-hour marks", "actors/planner/prefix_gate.py",
      "CACHE_TTL = 300.0", "CACHE_TTL = 3600.0", (GATE,)),
    M("r29-follow-up-shows-511-bytes", "R29: the follow-up shows the first 512 bytes", "actors/compactor/compaction.py",
      "cut_utf8(answer, LINE_LIMIT)}", "cut_utf8(answer, LINE_LIMIT - 1)}", (COMPACTION,)),
    M("r35-zoom-page-one-byte-over", "R35: pages of 16,000 bytes", "actors/zoom/__init__.py",
      "begin + ZOOM_PAGE_BYTES", "begin + ZOOM_PAGE_BYTES + 1",
      (CHAT + "::test_r35_a_long_message_is_zoomed_in_pages_of_16000_bytes",)),
    # -- the spec review ------------------------------------------------------------------------
    M("r25-record-only-when-merged", "R25: a batch that merged nothing while shrinking is recorded too",
      "actors/planner/planning.py", "        if record is not None:\n            merged, t, still_open = record\n",
      "        if record is not None and record[0]:\n            merged, t, still_open = record\n", (LAWS,)),
    # -- one more per rule ------------------------------------------------------------------------
    M("r2-gap-accepted", "R2: a gap in the ids is a loud error at open", "actors/folder/_scan.py",
      '        if rec["i"] != next_id:\n', '        if rec["i"] < next_id:\n',
      (RECOVERY + "::test_r2_a_gap_is_found_at_open_when_it_lies_in_the_tail",)),
    M("r3-five-kinds", "R3: exactly six kinds", "actors/folder/_records.py",
      'KINDS = frozenset(("user", "everchat", "tool", "echo", "work", "note"))',
      'KINDS = frozenset(("user", "everchat", "tool", "echo", "note"))',
      (STORE_API + "::test_r3_each_of_the_six_kinds_is_logged_with_the_r1_fields",)),
    M("r5-shared-lock", "R5: one writer holds the folder's lock", "actors/folder/_lock.py",
      "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)",
      ("tests/test_store_lock.py",)),
    M("r7-keeps-one-character-less", "R7: the first and last 15,000 characters are kept",
      "actors/folder/_records.py", "ECHO_KEEP_CHARS = 15_000", "ECHO_KEEP_CHARS = 14_999", (RECORDS,)),
    M("r8-parts-of-16001-bytes", "R8: parts of at most 16,000 bytes", "actors/folder/_records.py",
      "PART_BYTES = 16_000", "PART_BYTES = 16_001", (RECORDS,)),
    M("r9-image-over-5-mib", "R9: images of at most 5 MB", "actors/folder/_assets.py",
      "if len(data) > MAX_ASSET_BYTES:", "if len(data) >= MAX_ASSET_BYTES:",
      (STORE_API + "::test_r9_an_image_of_exactly_5_mib_is_stored",)),
    M("r10-node-of-513-bytes", "R10: a node is at most 512 bytes", "actors/folder/_prepare.py",
      "if not 1 <= size <= NODE_BYTES:", "if not 1 <= size <= NODE_BYTES + 1:",
      (STORE_API + "::test_r10_a_node_has_1_to_512_bytes_and_covers_logged_messages",)),
    M("r10-node-past-the-log", "R10: node(l, i) covers the 2^l messages from i * 2^l, all logged",
      "actors/folder/_prepare.py", "if (i + 1) << level > count:", "if (i + 1) << level > count + 1:",
      (STORE_API + "::test_r10_a_node_has_1_to_512_bytes_and_covers_logged_messages",)),
    M("r12-node-built-twice", "R12: a node is built once", "actors/folder/_store.py",
      "                if old != text:\n                    raise StoreError(",
      "                if False:\n                    raise StoreError(",
      (STORE_API + "::test_r10_r12_a_node_is_built_once_and_read_by_level_and_index",)),
    M("r14-newline-kept", "R14: every newline of a line's text becomes one space", "actors/tree/_nodes.py",
      '    return text.replace("\\n", " ")', "    return text", (EXAMPLES, LAWS)),
    M("r15-placeholder-text", "R15: an unbuilt line reads (not summarized yet: zoom it)",
      "actors/tree/_nodes.py", 'PLACEHOLDER = "(not summarized yet: zoom it)"',
      'PLACEHOLDER = "(not summarized yet)"', (EXAMPLES,)),
    M("r16-newline-not-counted", "R16: each line counted with its trailing newline", "actors/tree/_tree.py",
      "_SPAN_HEAD[key & _LEVEL_MASK] + rendered + 1", "_SPAN_HEAD[key & _LEVEL_MASK] + rendered", (LAWS,)),
    M("r21-cview-not-refitted-on-merge", "R21: on a view merge the compaction view is the view fitted down",
      "actors/tree/_planner.py", "        self.cview = cview = view.copy()", "        cview = self.cview", (LAWS,)),
    M("r22-views-not-saved", "R22: the views are saved at every change", "actors/planner/planning.py",
      "        if steps:\n            self._save_views()\n        return steps",
      "        return steps", (LAWS,)),
    M("r24-disagreeing-view-accepted", "R24: a view.json that disagrees with the records is a loud error",
      "actors/planner/view_check.py", "    if not _expected(fold, view):\n        raise", "    if False:\n        raise",
      (CHAT + "::test_r24_a_view_json_that_disagrees_with_the_merge_records_is_a_loud_error",)),
    M("r28-ruler-511", "R28: a ruler of exactly 512 - characters", "actors/prompt/tasks.py",
      'RULER = "-" * LINE_LIMIT', 'RULER = "-" * (LINE_LIMIT - 1)', (COMPACTION,)),
    M("r29-final-cut-513", "R29: the kept line is cut to 512 bytes", "actors/compactor/compaction.py",
      "    cut = cut_utf8(line, LINE_LIMIT)", "    cut = cut_utf8(line, LINE_LIMIT + 1)", (COMPACTION,)),
    M("r30-no-retry-at-next-message", "R30: failed nodes become startable at the next message",
      "actors/tree/_planner.py", "            self.budget = budget\n        self._retry_failed()\n",
      "            self.budget = budget\n",
      (EXAMPLES + "::test_r31_a_leaf_waits_while_8_lines_before_it_are_unbuilt",)),
    M("r31-nine-jobs", "R31: at most 8 compactions at once", "actors/tree/_planner.py",
      "if not 1 <= self.jobs <= 8:", "if not 1 <= self.jobs <= 9:",
      (WAIT + "::test_r31_a_pool_runs_1_to_8_compactions",)),
    M("r23-blocks-of-5", "R23: the view is sent in blocks of 4 lines", "actors/prompt/__init__.py",
      "BLOCK_LINES = 4", "BLOCK_LINES = 5", (GATE,)),
    M("r35-zoom-id-not-a-multiple", "R35: id a multiple of n", "actors/zoom/__init__.py",
      "        if first < 0 or first % count:", "        if first < 0:",
      (CHAT + "::test_r35_zoom_of_a_line_that_does_not_exist_is_a_clear_error",)),
    M("r33-compactions-on-the-reply-model", "R33: compactions use a cheap model (Haiku) by default",
      "actors/settings/__init__.py", '("anthropic", "compaction"): "claude-haiku-5-5",',
      '("anthropic", "compaction"): "claude-sonnet-5",',
      ("tests/test_config.py::test_r33_with_an_anthropic_key_replies_come_from_sonnet_and_compactions_from_haiku",)),
    M("r37-incomplete-unmarked", "R37: a stopped stream keeps its text, marked incomplete", "actors/turns/turn.py",
      '    return f"{text}\\n[incomplete: {INCOMPLETE.get(why, why)}]"', "    return text",
      (TURNS + "::test_r37_a_stopped_call_keeps_its_text_marked_incomplete",)),
    M("r36-settle-timeout-30", "R36: settle_timeout defaults to 20 s", "actors/settings/__init__.py",
      'values.get("settle_timeout", 20.0)', 'values.get("settle_timeout", 30.0)',
      ("tests/test_config.py::test_without_any_key_both_models_are_the_offline_demo",)),
    M("r36-unsettled-line-unmarked", "R36: an unbuilt line past the timeout is marked as not summarized yet",
      "actors/planner/planning.py", 'UNSETTLED_MARK = "(not summarized yet, first 512 bytes) "', 'UNSETTLED_MARK = ""',
      ("tests/test_turns_wire.py::test_r36_after_the_settle_timeout_the_turn_shows_the_message_cut_and_marked",)),
)
