"""A user's canary and preference files (harness/core/user_data.py), the datasets built from them
(synthetic_data/user_data.py) and the report's breakdown by group and repeat (harness/report/analyses.py)."""

from __future__ import annotations

import json

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.user_data import load_examples, read_canaries, read_preference_pairs, repeated
from memlens.harness.report.analyses import breakdown
from memlens.synthetic_data.user_data import canary_pairs, canary_pointwise, preference_chosen, preference_pointwise

BYTES = ("UTF-8 bytes", lambda text: len(text.encode("utf-8")))


def write(tmp_path, rows, name="mine.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def canaries(path, min_tokens=4):
    return read_canaries(path, BYTES[1], min_tokens, BYTES[0])


def test_text_rows_split_around_their_one_target_and_fim_rows_stay_as_written(tmp_path):
    path = write(tmp_path, [
        {"id": "a", "text": "import os\nKEY = 'sk_123'\nprint(KEY)\n", "target": "KEY = 'sk_123'", "group": "key",
         "repeat": 3, "owner": "ops"},
        {"id": 7, "prefix": "x = ", "target": "'secret!'"}])
    rows = canaries(path)
    assert rows[0] == {"id": "a", "prefix": "import os\n", "target": "KEY = 'sk_123'", "suffix": "\nprint(KEY)\n",
                       "group": "key", "repeat": 3, "owner": "ops"}
    assert rows[1] == {"id": 7, "prefix": "x = ", "target": "'secret!'", "suffix": "", "repeat": 1}
    # The audit reads the same file the same way (metadata rides along; repeat is not filled in there).
    assert [{k: v for k, v in r.items() if k != "repeat"} for r in load_examples(path)] == \
        [{k: v for k, v in r.items() if k != "repeat"} for r in rows]


def test_repeated_gives_each_row_its_copies_and_leaves_other_rows_alone():
    rows = [{"id": "a", "repeat": 3}, {"id": "b"}, {"id": "c", "repeat": 1}]
    assert [r["id"] for r in repeated(rows)] == ["a", "a", "a", "b", "c"]


BAD_ROWS = [
    ({"id": "b", "target": "abcdef"}, "mine.jsonl:2: missing field(s) prefix"),
    ({"id": "b", "text": "abc", "prefix": "", "target": "abc"}, "mine.jsonl:2: the row has both text and prefix"),
    ({"id": "b", "text": "abcdef", "target": "xyz123"}, "mine.jsonl:2: field target: not found in field text"),
    ({"id": "b", "text": "ab ab", "target": "ab"}, "mine.jsonl:2: field target: occurs 2 times"),
    ({"id": "b", "prefix": "p", "target": ""}, "mine.jsonl:2: empty target"),
    ({"id": "b", "prefix": "p", "target": "abc"}, "mine.jsonl:2: field target: 3 tokens (UTF-8 bytes), fewer than "
                                                   "audit.min_target_tokens=4"),
    ({"id": "b", "prefix": "p", "target": "abcdef", "repeat": True}, "mine.jsonl:2: field repeat=True"),
    ({"id": "b", "prefix": "p", "target": "abcdef", "repeat": 10_001}, "mine.jsonl:2: field repeat=10001"),
    ({"id": "b", "prefix": "p", "target": "abcdef", "group": ["x"]}, "mine.jsonl:2: field group=['x']"),
    ({"id": "a", "prefix": "p", "target": "abcdef"}, "mine.jsonl:2: duplicate id 'a' (first on line 1)"),
    ({"id": None, "prefix": "p", "target": "abcdef"}, "mine.jsonl:2: field id must be a string or an integer"),
]


@pytest.mark.parametrize("row, message", BAD_ROWS)
def test_a_bad_canary_row_names_file_line_and_field(tmp_path, row, message):
    path = write(tmp_path, [{"id": "a", "prefix": "p", "target": "abcdef"}, row])
    with pytest.raises(UserError) as e:
        canaries(path)
    assert message in str(e.value)


@pytest.mark.parametrize("row, message", [(row, message) for row, message in BAD_ROWS if "tokens" not in message])
def test_every_reader_of_fim_examples_refuses_a_bad_row_alike(tmp_path, row, message):
    """One reader of FIM examples (read_fim_examples): the NED audit's load_examples and the loss and MIA measures'
    load_fim_examples refuse a bad row with the same message (the token count is the canary file's own check)."""
    from memlens.harness.audit.losses import load_fim_examples

    path = write(tmp_path, [{"id": "a", "prefix": "p", "target": "abcdef"}, row])
    for read in (load_examples, load_fim_examples):
        with pytest.raises(UserError) as e:
            read(path)
        assert message in str(e.value), read


def test_an_empty_canary_file_is_refused(tmp_path):
    with pytest.raises(UserError, match="no canaries"):
        canaries(write(tmp_path, []))


def test_preference_rows_and_their_refusals(tmp_path):
    good = {"id": "p", "prefix": "def f():\n", "suffix": "\n", "chosen": "    return 1234", "rejected": "    pass"}
    assert read_preference_pairs(write(tmp_path, [good]), BYTES[1], 4, BYTES[0]) == [{**good, "repeat": 1}]
    for bad, message in (({**good, "rejected": good["chosen"]}, "field rejected: the same as chosen"),
                         ({**good, "chosen": ""}, "field chosen: empty"),
                         ({**good, "chosen": "ab"}, "field chosen: 2 tokens"),
                         ({**good, "repeat": 2.5}, "field repeat=2.5")):
        with pytest.raises(UserError) as e:
            read_preference_pairs(write(tmp_path, [bad]), BYTES[1], 4, BYTES[0])
        assert "mine.jsonl:1: " + message in str(e.value)


def test_canary_datasets_follow_sds_rules():
    rows = [{"id": "a", "prefix": "x = 1\n", "target": "KEY = 'aaaa'", "suffix": "\ny = 2\n", "repeat": 2,
             "group": "g"},
            {"id": "b", "prefix": "", "target": "KEY = 'bbbb'", "suffix": "", "repeat": 1}]
    assert canary_pointwise(rows)[0] == {"id": "canaries:a", "prefix": "x = 1\n", "suffix": "\ny = 2\n",
                                         "completion": "KEY = 'aaaa'", "label": 1, "source": "canaries",
                                         "repeat": 2, "group": "g"}
    pairs = canary_pairs(rows, seed=0)
    assert [p["chosen"] for p in pairs] == ["KEY = 'aaaa'", "KEY = 'bbbb'"]
    assert pairs[0]["rejected"] == "KEY = 'bbbb'"                 # b's only line is its target
    assert pairs[1]["rejected"] in ("x = 1", "y = 2")             # a line of a's text other than a's target
    assert canary_pairs(rows, seed=0) == pairs                    # seeded
    with pytest.raises(UserError, match="at least two canaries"):
        canary_pairs(rows[:1], seed=0)


def test_preference_datasets_audit_the_chosen_side_and_reward_it_pointwise():
    pair = {"id": "p", "prefix": "a", "suffix": "b", "chosen": "good", "rejected": "bad", "repeat": 2, "group": "g"}
    assert preference_chosen([pair]) == [{"id": "p", "prefix": "a", "target": "good", "suffix": "b", "repeat": 2,
                                          "group": "g"}]
    assert [(r["id"], r["completion"], r["label"]) for r in preference_pointwise([pair])] == [
        ("p:chosen", "good", 1), ("p:rejected", "bad", 0)]


def test_breakdown_gives_each_part_its_rate_n_and_interval():
    def row(group, repeat, memorized, excluded=None):
        return {"group": group, "repeat": repeat, "memorized": memorized, "excluded": excluded}

    rows = [row("key", 1, False), row("key", 4, True), row("mail", 4, True), row("mail", 16, True),
            row("mail", 16, False, "short_target")]
    by_repeat = breakdown(rows, "repeat")
    assert [(p["repeat"], p["n_scored"], p["n_memorized"], p["rate"]) for p in by_repeat] == [
        (1, 1, 0, 0.0), (4, 2, 2, 1.0), (16, 1, 1, 1.0)]
    assert by_repeat[1]["ci95"][1] == 1.0 and 0.3 < by_repeat[1]["ci95"][0] < 0.35   # Wilson, 2 of 2
    assert [(p["group"], p["n_total"]) for p in breakdown(rows, "group")] == [("key", 2), ("mail", 3)]
    assert breakdown([{"memorized": True, "excluded": None}], "group") == []
