"""The plain-data codec between the `tests` reward's program and grader sandboxes (recipes/sandbox/codec.py): what
crosses is exactly what was sent, in plain types only, and anything else is refused."""

import io
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.recipes.sandbox import codec as codec

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.integers() | st.text(max_size=4), inner, max_size=4)
    | st.frozensets(st.integers(), max_size=4).map(set) | st.frozensets(st.text(max_size=3), max_size=4),
    max_leaves=20)


def round_trip(value):
    frame = codec.encode_frame({"v": codec.to_plain(value)})
    return codec.from_plain(codec.read_frame(io.BytesIO(frame), 1 << 20)["v"])


@given(PLAIN)
def test_every_plain_value_crosses_unchanged_with_its_type(value):
    back = round_trip(value)
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("value, encoded", [
    ((1, "a"), {"~": "tuple", "v": [1, "a"]}),
    ({1: "x"}, {"~": "dict", "v": [[1, "x"]]}),
    ({3, 1, 2}, {"~": "set", "v": [1, 2, 3]}),
    (b"\x00\xff", {"~": "bytes", "v": "00ff"}),
    (1 + 2j, {"~": "complex", "v": [1.0, 2.0]}),
    ([True, None, 1.5], [True, None, 1.5]),
])
def test_tagged_forms_by_hand(value, encoded):
    assert codec.to_plain(value) == encoded


def test_special_floats_cross():
    back = round_trip([math.inf, -0.0, math.nan])
    assert back[0] == math.inf and math.copysign(1, back[1]) == -1 and math.isnan(back[2])


class Sneaky(int):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [Sneaky(1), object(), lambda: 1, iter([1]), [[[[]]]] * 1])
def test_objects_of_the_programs_making_do_not_cross(value):
    if isinstance(value, list):          # nesting beyond MAX_DEPTH
        deep = []
        for _ in range(codec.MAX_DEPTH + 2):
            deep = [deep]
        value = deep
    with pytest.raises(codec.Unencodable):
        codec.to_plain(value)


def test_an_oversized_or_unknown_frame_is_refused():
    frame = codec.encode_frame({"v": "x" * 100})
    with pytest.raises(ValueError, match="over the 10-byte limit"):
        codec.read_frame(io.BytesIO(frame), 10)
    assert codec.read_frame(io.BytesIO(frame[:6]), 1 << 20) is None        # cut short: the stream ended
    with pytest.raises(codec.Unencodable, match="unknown tag"):
        codec.from_plain({"~": "pickle", "v": "..."})
