"""NED and sliding-window NED (paper 003 Sec. 3, 4.2, Appendix C): hand-derived cases and property tests
of the fast batch form against a brute-force window loop."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz.distance import Levenshtein

from memlens.harness.text.distance import normalized_edit_distance, sliding_window_ned, sliding_window_ned_batch


def _levenshtein_dp(a: str, b: str) -> int:
    """Textbook dynamic programme, independent of rapidfuzz."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _brute_force_sliding(target: str, completion: str) -> float:
    """The definition, window by window: every start position, tail windows (shorter than the target)
    included; a completion no longer than the target is compared whole."""
    m = len(target)
    if len(completion) <= m:
        return Levenshtein.distance(target, completion) / max(m, len(completion))
    return min(Levenshtein.distance(target, completion[i:i + m]) / max(m, len(completion[i:i + m]))
               for i in range(len(completion)))


# --- normalized_edit_distance ------------------------------------------------------------------------

def test_ned_kitten_sitting():
    # k->s, e->i, insert g: 3 edits over max(6, 7) characters
    assert normalized_edit_distance("kitten", "sitting") == 3 / 7


@pytest.mark.parametrize("a,b,expected", [
    ("", "", 0.0),
    ("abc", "", 1.0),
    ("", "abc", 1.0),
    ("abc", "abc", 0.0),
    ("abc", "abd", 1 / 3),
    ("ab", "ba", 2 / 2),            # one edit turns "ab" into a 1-, 3-letter or "xb"/"ax" string: 2
    ("flaw", "lawn", 2 / 4),        # delete f, append n
])
def test_ned_hand_cases(a, b, expected):
    assert normalized_edit_distance(a, b) == expected


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12))
def test_ned_matches_textbook_dp(a, b):
    longest = max(len(a), len(b))
    expected = _levenshtein_dp(a, b) / longest if longest else 0.0
    assert normalized_edit_distance(a, b) == expected


# --- sliding_window_ned --------------------------------------------------------------------------------

def test_sliding_target_inside_completion_is_zero():
    assert sliding_window_ned("abc", "xxabcxx") == 0.0


def test_sliding_one_substitution():
    # "abc" does not occur in the completion (so every window costs >= 1); window "abd" costs 1.
    assert sliding_window_ned("abc", "zzabdzz") == 1 / 3


def test_sliding_windows_by_hand():
    # target "ab", completion "xaby": windows "xa" (2 edits), "ab" (0), "by" (2)
    assert sliding_window_ned("ab", "xaby") == 0.0
    # target "ab", completion "xayb": windows "xa", "ay", "yb" cost 2, 1, 1 -> 1/2
    assert sliding_window_ned("ab", "xayb") == 0.5


def test_sliding_tail_window_counts():
    # The completion ends one character before the target does: the tail window "abcdefghi" (start 10)
    # is one deletion from the target, NED 1/10; the full windows (starts 0..9) cost at least 2.
    assert sliding_window_ned("abcdefghij", "xxxxxxxxxxabcdefghi") == 0.1
    assert sliding_window_ned_batch(["abcdefghij"], ["xxxxxxxxxxabcdefghi"]) == [0.1]
    # A lone final character is a tail window too: "ab" vs windows "xa", "a" -> 1 edit of 2.
    assert sliding_window_ned("ab", "xxa") == 0.5
    assert sliding_window_ned_batch(["ab"], ["xxa"]) == [0.5]


def test_sliding_completion_shorter_than_target_uses_whole_completion():
    # "abc" vs "abcdef": 3 insertions, over max length 6
    assert sliding_window_ned("abcdef", "abc") == 0.5


def test_sliding_equal_lengths_is_plain_ned():
    assert sliding_window_ned("abc", "abd") == 1 / 3


def test_sliding_empty_completion_is_one():
    assert sliding_window_ned("abc", "") == 1.0


def test_sliding_empty_target_raises():
    with pytest.raises(ValueError, match="empty"):
        sliding_window_ned("", "abc")
    with pytest.raises(ValueError, match="empty"):
        sliding_window_ned_batch(["abc", ""], ["abc", "abc"])


def test_sliding_unicode_counts_code_points():
    assert sliding_window_ned("héllo", "» héllo «") == 0.0
    assert sliding_window_ned("日本語", "x日本人x") == 1 / 3
    assert sliding_window_ned("😀x", "a😀y") == 0.5


APPENDIX_C_TARGET = 'public_key.set_public_key_id("EC Public Key")'
APPENDIX_C_COMPLETION = "\n".join([        # Listing 2, lines joined with "\n"
    'public_key.set_public_key_id("EC Public Key")',
    "",
    "# Sign the message using the private key",
    "signed_message = legitimate_crypto.sign(message, key)",
    "",
    "# Verify the signed message using the public key",
    "verified_message = legitimate_crypto.verify(signed_message)",
])


def test_appendix_c_example():
    # Paper 003 Appendix C: plain NED 0.82 (the target is the first line, the other 206 characters are
    # insertions: 206 / 251), sliding-window NED 0.
    assert len(APPENDIX_C_TARGET) == 45 and len(APPENDIX_C_COMPLETION) == 251
    assert normalized_edit_distance(APPENDIX_C_TARGET, APPENDIX_C_COMPLETION) == 206 / 251
    assert round(normalized_edit_distance(APPENDIX_C_TARGET, APPENDIX_C_COMPLETION), 2) == 0.82
    assert sliding_window_ned(APPENDIX_C_TARGET, APPENDIX_C_COMPLETION) == 0.0
    assert sliding_window_ned_batch([APPENDIX_C_TARGET], [APPENDIX_C_COMPLETION]) == [0.0]


# --- sliding_window_ned_batch == the definition ------------------------------------------------------

def test_batch_hand_cases_in_one_batch():
    targets = ["abc", "abc", "ab", "abcdef", "abc", "abc", "héllo"]
    completions = ["xxabcxx", "zzabdzz", "xayb", "abc", "abd", "", "» héllo «"]
    assert sliding_window_ned_batch(targets, completions) == [0.0, 1 / 3, 0.5, 0.5, 1 / 3, 1.0, 0.0]


def test_batch_empty_and_length_mismatch():
    assert sliding_window_ned_batch([], []) == []
    with pytest.raises(ValueError, match="2 targets but 1 completions"):
        sliding_window_ned_batch(["a", "b"], ["a"])


def test_batch_long_completions_need_several_rounds():
    # Many windows (> the coarse stride) with the best one placed away from the coarse grid.
    target = "def f(x): return x + 1"
    noise = "import os, sys; y = [i * 2 for i in range(10)]  # unrelated code "
    completions = [noise[:k] + target.replace("+", "-") + noise[k:] for k in range(0, len(noise), 3)]
    targets = [target] * len(completions)
    expected = [_brute_force_sliding(target, c) for c in completions]
    assert all(e == 1 / len(target) for e in expected)
    assert sliding_window_ned_batch(targets, completions) == expected


SMALL_ALPHABET = st.text(alphabet="ab c(", max_size=40)   # repetitive: many near-matches, ties
ANY_TEXT = st.text(max_size=30)                           # unicode, incl. astral code points


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(SMALL_ALPHABET.filter(bool), SMALL_ALPHABET), max_size=12))
def test_batch_equals_brute_force_small_alphabet(pairs):
    targets = [t for t, _ in pairs]
    completions = [c for _, c in pairs]
    expected = [_brute_force_sliding(t, c) for t, c in pairs]
    assert sliding_window_ned_batch(targets, completions) == expected
    assert [sliding_window_ned(t, c) for t, c in pairs] == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(ANY_TEXT.filter(bool), ANY_TEXT), max_size=8))
def test_batch_equals_brute_force_unicode(pairs):
    targets = [t for t, _ in pairs]
    completions = [c for _, c in pairs]
    assert sliding_window_ned_batch(targets, completions, workers=1) == \
        [_brute_force_sliding(t, c) for t, c in pairs]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abcd", min_size=1, max_size=8), st.data())
def test_batch_equals_brute_force_embedded_target(target, data):
    # A possibly-edited copy of the target inside a long completion (the memorized case).
    left = data.draw(st.text(alphabet="abcdxy", max_size=60))
    right = data.draw(st.text(alphabet="abcdxy", max_size=60))
    copy = data.draw(st.text(alphabet="abcd", max_size=10))
    completion = left + copy + right
    assert sliding_window_ned_batch([target], [completion]) == [_brute_force_sliding(target, completion)]


def test_batch_threaded_path_equals_brute_force():
    # Enough pairs that rapidfuzz's threads are used (workers=-1); seeded random code-like strings.
    import random

    rng = random.Random(3)
    alphabet = "ab (x)=\n"
    targets = ["".join(rng.choices(alphabet, k=rng.randint(1, 12))) for _ in range(3000)]
    completions = ["".join(rng.choices(alphabet, k=rng.randint(0, 30))) for _ in range(3000)]
    assert sliding_window_ned_batch(targets, completions, workers=-1) == \
        [_brute_force_sliding(t, c) for t, c in zip(targets, completions)]


def test_batch_splits_large_inputs_into_chunks(monkeypatch):
    # Chunking bounds memory; results must not depend on where the chunks are cut.
    import memlens.harness.text.distance as distance

    monkeypatch.setattr(distance, "_MAX_CHARS_PER_CALL", 7)
    targets = ["ab", "abc", "xyz", "bq", "abc"]       # none occurs verbatim: every pair is searched
    completions = ["zzzzzzzzzaXb", "zabdz", "xy", "aaaaaaaaaaaaaaaaaab", "zzzzzzzzzzzzzzzzzzzzzabx"]
    assert sliding_window_ned_batch(targets, completions) == \
        [_brute_force_sliding(t, c) for t, c in zip(targets, completions)]


def test_batch_rejects_bad_workers():
    with pytest.raises(ValueError, match="workers=0"):
        sliding_window_ned_batch(["ab"], ["abc"], workers=0)


# --- targets longer than one 64-bit word: the kernel's multi-word carries --------------------------

LONG_ALPHABET = "ab c(\n"                       # few letters: long near-matches, many ties


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet=LONG_ALPHABET, min_size=60, max_size=200),
                          st.text(alphabet=LONG_ALPHABET, max_size=260)), min_size=1, max_size=4))
def test_batch_equals_brute_force_multiword_targets(pairs):
    # 60-200 characters: 1 to 4 words, lengths on and around the 64/128/192 word boundaries
    targets = [t for t, _ in pairs]
    completions = [c for _, c in pairs]
    assert sliding_window_ned_batch(targets, completions, workers=1) == \
        [_brute_force_sliding(t, c) for t, c in pairs]


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="ab(x", min_size=1, max_size=140), st.data())
def test_batch_equals_brute_force_edited_copy_in_long_completion(target, data):
    # The memorized case with multi-word targets: an edited copy of the target wrapped in other text.
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(target) - 1), st.sampled_from("ab(xé")),
                               max_size=6))
    copy = list(target)
    for position, char in edits:
        copy[position] = char
    left = data.draw(st.text(alphabet="ab(xy", max_size=70))
    right = data.draw(st.text(alphabet="ab(xy", max_size=70))
    completion = left + "".join(copy) + right
    assert sliding_window_ned_batch([target], [completion]) == [_brute_force_sliding(target, completion)]


def test_batch_non_ascii_and_surrogates_across_words():
    # Code points >= 256 take the kernel's sorted-list path; a lone surrogate is a legal str character.
    import random

    rng = random.Random(7)
    alphabet = "aé日😀\ud800 b"
    targets = ["".join(rng.choices(alphabet, k=rng.randint(1, 150))) for _ in range(60)]
    completions = ["".join(rng.choices(alphabet, k=rng.randint(0, 220))) for _ in range(60)]
    assert sliding_window_ned_batch(targets, completions, workers=1) == \
        [_brute_force_sliding(t, c) for t, c in zip(targets, completions)]


def test_batch_large_alphabet_of_non_ascii_code_points():
    # Hundreds of distinct code points >= 256 per target (CJK, astral): one match-table row each.
    import random

    rng = random.Random(5)
    alphabet = [chr(0x4E00 + k) for k in range(300)] + [chr(0x1F600 + k) for k in range(40)] + ["a", " "]
    targets = ["".join(rng.choices(alphabet, k=rng.randint(1, 200))) for _ in range(30)]
    completions = ["".join(rng.choices(alphabet, k=rng.randint(0, 240))) for _ in range(30)]
    completions[0] = completions[0][:5] + targets[0][:-1] + "a" + completions[0][5:]   # a near copy
    assert sliding_window_ned_batch(targets, completions, workers=1) == \
        [_brute_force_sliding(t, c) for t, c in zip(targets, completions)]


def test_batch_two_threads_equal_one_thread_and_brute_force():
    # >= 2 * _MIN_PAIRS_PER_THREAD searched pairs, so workers=2 really runs two kernel threads.
    import random

    rng = random.Random(11)
    alphabet = "def (x):\n return"
    targets = ["".join(rng.choices(alphabet, k=rng.randint(20, 90))) for _ in range(2100)]
    completions = ["".join(rng.choices(alphabet, k=rng.randint(0, 120))) for _ in range(2100)]
    expected = [_brute_force_sliding(t, c) for t, c in zip(targets, completions)]
    assert sliding_window_ned_batch(targets, completions, workers=2) == expected
    assert sliding_window_ned_batch(targets, completions, workers=1) == expected
