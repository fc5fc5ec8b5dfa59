"""The great-expectations runner on its own frames: failing rows are named by their key,
an expectation that cannot run says why."""

import pandas as pd

from memory_pipelines.quality_gates.expectations import validate_frame


def test_failing_rows_are_named_by_the_key_columns():
    frame = pd.DataFrame({"session_id": ["s1", "s1", "s2"], "seq": [1, 1, 1], "role": ["user", "bot", "user"]})
    result = validate_frame("messages", frame, [("unique", ("session_id", "seq")),
                                                ("in_set", "role", ("user", "assistant"))], ("session_id", "seq"))
    assert not result.passed and result.rows == 3 and len(result.failures) == 2
    assert "s1" in result.failures[0] and "1 of 3 rows fail" in result.failures[1]


def test_an_expectation_over_a_missing_column_reports_the_error_not_a_count():
    result = validate_frame("x", pd.DataFrame({"a": [1, 2, 3]}), [("not_null", "b")], ("a",))
    assert not result.passed
    assert result.failures[0].startswith("b is never null: error ") and '"b"' in result.failures[0]


def test_a_check_given_in_chunks_finds_what_it_finds_over_the_whole_frame():
    from memory_pipelines.quality_gates.expectations import FrameValidation

    frame = pd.DataFrame({"session_id": ["s1", "s1", "s2", "s3", "s3", "s4"], "seq": [1, 1, 1, 1, 2, 1],
                          "role": ["user", "bot", "user", "tool?", "user", "bot"]})
    specs = [("unique", ("session_id", "seq")), ("in_set", "role", ("user", "assistant")), ("not_null", "seq")]
    whole = validate_frame("messages", frame, specs, ("session_id", "seq"))
    chunked = FrameValidation("messages", specs, ("session_id", "seq"))
    for part in (frame.iloc[:2], frame.iloc[2:2], frame.iloc[2:5], frame.iloc[5:]):  # cut between sessions
        chunked.add(part)
    assert chunked.result() == whole
    assert "3 of 6 rows fail" in whole.failures[1] and whole.failures[0].startswith("(session_id, seq) is unique")
