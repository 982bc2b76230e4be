"""Durations as people read them: days, hours, minutes and seconds, rounded to the precision they deserve."""

import pandas as pd
import pytest

from app.common.results import duration_text, time_left_text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.2, "under 1 s"),
        (1, "1 s"),
        (44.4, "44 s"),
        (59.4, "59 s"),
        (59.6, "1 min"),  # rounded first, then split: never "60 s"
        (199, "3 min 20 s"),  # to 10 s under 10 minutes
        (596, "10 min"),
        (734, "12 min"),  # to the minute under a day
        (3_599, "1 h"),
        (3_631, "1 h 1 min"),
        (46_102, "12 h 48 min"),  # the Abadi preset's "about 46102 s left"
        (86_371, "1 d"),
        (90_061, "1 d 1 h"),  # to the hour beyond a day
        (200_000, "2 d 8 h"),
    ],
)
def test_duration_text_reads_in_days_hours_minutes_and_seconds(seconds, text):
    assert duration_text(seconds) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, None, True])
def test_duration_text_of_no_duration_is_a_question_mark(value):
    assert duration_text(value) == "?"


def test_a_running_runs_time_left_reads_in_hours_and_minutes():
    frame = pd.DataFrame({"step": [1, 2, 21], "elapsed_s": [0.0, 0.5, 10.0]})  # 0.5 s a step after the first
    assert time_left_text(frame, 92_225, 21) == "about 12 h 48 min left"  # (92,225 − 21) × 0.5 s = 46,102 s
    assert time_left_text(frame, 21, 21) == "finishing"
    assert time_left_text(frame.iloc[:2], 92_225, 2) == "measuring the pace"  # too few steps for a pace
