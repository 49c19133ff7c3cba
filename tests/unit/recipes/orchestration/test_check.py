"""memlens.recipes.orchestration.check's verdicts on hand-made inputs (the integration tests run `memlens check` on real fixtures)."""

from memlens.recipes.orchestration.check import Check, check_context, check_dtype, render


def test_context_fails_naming_every_stage_length_above_it():
    ok = check_context(2048, {"FT.1.max_seq_len": 512, "IPO.max_length": 1024})
    assert ok.ok and "1024 (IPO.max_length)" in ok.detail
    bad = check_context(1024, {"FT.1.max_seq_len": 2048, "RM.1.max_length": 4096, "IPO.max_length": 512})
    assert not bad.ok and bad.fix == "lower FT.1.max_seq_len, RM.1.max_length to at most 1024"
    assert not check_context(None, {"FT.1.max_seq_len": 512}).ok


def test_float16_training_on_cpu_is_refused_bf16_is_allowed():
    assert not check_dtype("float16", "cpu").ok
    assert check_dtype("bfloat16", "cpu").ok and check_dtype("float32", "cpu").ok


def test_a_failed_check_prints_its_fix():
    text = render([Check("context", False, "1024 tokens", "lower X"), Check("BOS", True, "none added")], "title")
    assert text.splitlines() == ["title", "  context  FAIL  1024 tokens", "                 fix: lower X",
                                 "  BOS      ok    none added"]
