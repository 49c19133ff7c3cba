"""The one JSONL reader/writer (memlens.harness.core.io) and the shared config checks (memlens.harness.core.config)."""

from __future__ import annotations

import dataclasses

import pytest

from memlens.harness.core.config import check_dataclass_values, require_bool
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import RowStore, atomic_write_jsonl, iter_jsonl_numbered, jsonl_line, read_jsonl

# Every character str.splitlines() treats as a line boundary, except "\n" itself (the JSONL separator).
SPLITLINES_BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r\n"]


def test_the_list_is_every_line_break_of_splitlines():
    breaks = {chr(c) for c in range(0x110000) if len(f"a{chr(c)}b".splitlines()) == 2}
    assert breaks - {"\n"} == {b for b in SPLITLINES_BREAKS if len(b) == 1}


def test_rows_with_every_line_separator_round_trip(tmp_path):
    rows = [{"id": i, "text": f"x{sep}y", "completion": sep.join(["a", "b", "c"])}
            for i, sep in enumerate(SPLITLINES_BREAKS)]
    rows.append({"id": "all", "text": "".join(SPLITLINES_BREAKS) + "\n"})
    path = tmp_path / "rows.jsonl"
    atomic_write_jsonl(path, rows)
    assert path.read_bytes().count(b"\n") == len(rows)     # one line per row, whatever the content
    assert read_jsonl(path) == rows
    store = RowStore(tmp_path / "store.jsonl")
    store.append(rows[:4])
    store.append(rows)                                     # no duplicates, none lost
    assert RowStore(tmp_path / "store.jsonl").rows() == rows[:4] + rows[4:]


def test_crlf_files_and_blank_lines_are_read(tmp_path):
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b'{"id": 1}\r\n\r\n  \n{"id": 2}\r\n')
    assert list(iter_jsonl_numbered(path)) == [(1, {"id": 1}), (4, {"id": 2})]


def test_bad_bytes_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"id": 1}\n{"id": "caf\xe9"}\n')
    with pytest.raises(UserError, match=r"bad\.jsonl:2: not UTF-8 text \(byte 0xe9 at column 12\); save the file as UTF-8"):
        read_jsonl(path)


def test_a_cut_off_line_is_called_cut_off(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"id": 1}\n{"id": 2, "prefix": "de\n')
    with pytest.raises(UserError) as e:
        read_jsonl(path)
    assert "cut.jsonl:2: not valid JSON (the line ends before its JSON object does" in str(e.value)
    assert "Invalid control character" not in str(e.value)


def test_jsonl_line_ends_in_the_only_newline():
    line = jsonl_line({"t": "a\nb\u2028c"})
    assert line.count("\n") == 1 and line.endswith("\n") and "\u2028" in line


@pytest.mark.parametrize("value", ["no", "yes", "false", "0", 0, 1, "", [], None])
def test_require_bool_refuses_everything_but_booleans(value):
    with pytest.raises(UserError, match=r"audit\.trust_remote_code=.*must be true or false.*pass "
                                        r"audit\.trust_remote_code=true or audit\.trust_remote_code=false"):
        require_bool(value, "audit.trust_remote_code")


def test_require_bool_passes_booleans_and_optional_none():
    assert require_bool(True, "k") is True and require_bool(False, "k") is False
    assert require_bool(None, "k", allow_none=True) is None


@dataclasses.dataclass
class _Settings:
    flag: bool = False
    maybe: bool | None = None
    n: int = 1
    lr: float | None = None
    counts: list[int] = dataclasses.field(default_factory=list)
    flags: list[bool] = dataclasses.field(default_factory=list)


def test_dataclass_check_names_unknown_keys_and_bad_booleans():
    check_dataclass_values(_Settings, {"flag": True, "maybe": None, "n": 3}, "stages.X")
    with pytest.raises(UserError, match=r"stages\.X: unknown key\(s\) \['nn'\]; valid keys are \['counts', 'flag', 'flags', "):
        check_dataclass_values(_Settings, {"nn": 1}, "stages.X")
    with pytest.raises(UserError, match=r"stages\.X\.flag='no': must be true or false"):
        check_dataclass_values(_Settings, {"flag": "no"}, "stages.X")
    with pytest.raises(UserError, match=r"stages\.X\.maybe='off': must be true, false or null"):
        check_dataclass_values(_Settings, {"maybe": "off"}, "stages.X")


@pytest.mark.parametrize("values, message", [
    ({"n": "abc"}, r"stages\.X\.n='abc': must be a number$"),
    ({"n": True}, r"stages\.X\.n=True: must be a number$"),          # a boolean is not a count
    ({"n": None}, r"stages\.X\.n=None: must be a number$"),
    ({"lr": "1e-3x"}, r"stages\.X\.lr='1e-3x': must be a number or null$"),
    ({"lr": [1]}, r"stages\.X\.lr=\[1\]: must be a number or null$"),
])
def test_dataclass_check_refuses_non_numbers_for_number_fields(values, message):
    with pytest.raises(UserError, match=message):
        check_dataclass_values(_Settings, values, "stages.X")


def test_dataclass_check_passes_numbers_and_leaves_lists_to_their_recipe():
    """An int passes for a float field, None for an optional one; a list[int] or list[bool] field is not a number or
    a boolean field (its items are the recipe's own check)."""
    check_dataclass_values(_Settings, {"n": 3, "lr": 1, "counts": [24, 6], "flags": [True]}, "stages.X")
    check_dataclass_values(_Settings, {"lr": 1e-3}, "stages.X")
    check_dataclass_values(_Settings, {"lr": None}, "stages.X")


def test_model_preset_schema_is_the_default_preset():
    """conf/model/tiny.yaml (the default preset) lists every ModelSettings key, and every preset uses
    only those keys (the CLI checks the composed `model` against ModelSettings)."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from memlens.recipes.stages.models import ModelSettings, parse_model

    conf = Path(__file__).resolve().parents[4] / "conf" / "model"
    fields = {f.name for f in dataclasses.fields(ModelSettings)}
    assert set(OmegaConf.load(conf / "tiny.yaml")) == fields
    for preset in conf.glob("*.yaml"):
        parse_model(OmegaConf.to_container(OmegaConf.load(preset)), f"model ({preset.name})")
