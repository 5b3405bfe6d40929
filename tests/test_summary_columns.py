"""summary.csv's column order (:data:`analysis.runs.summary.COLUMN_ORDER`): first what a person
reads, as nccl-tests' table and the headline show it, then the rest a group at a time; every
column keeps its place and none is lost.

Watched failing on a planted reorder (``time_s`` and ``estimator`` swapped in FIRST_COLUMNS) and
on a planted column missing from every group (``hlo_axes``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from analysis.report.columns import SUMMARY
from analysis.runs.summary import COLUMN_GROUPS, COLUMN_ORDER, FIRST_COLUMNS, in_reading_order

RESULTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "results.md"

# what a person reads first: which point, what ran, the time with its estimator and interval,
# nccl-tests' two bandwidths, the book's time beside it, and what to doubt (pinned exactly)
READ_FIRST = [
    "point",
    "status",
    "op",
    "axes",
    "size_bytes",
    "dtype",
    "mesh",
    "estimator",
    "time_s",
    "time_ci_low_s",
    "time_ci_high_s",
    "algbw_Bps",
    "busbw_Bps",
    "model_time_s",
    "flags",
    "caveats",
]


def test_the_first_columns_are_those_a_person_reads_in_that_order():
    assert list(FIRST_COLUMNS) == READ_FIRST
    assert list(COLUMN_ORDER[: len(READ_FIRST)]) == READ_FIRST


def test_every_column_has_one_place():
    assert len(COLUMN_ORDER) == len(set(COLUMN_ORDER))
    assert not set(FIRST_COLUMNS) & {c for group in COLUMN_GROUPS.values() for c in group}
    # the column dictionary (columns.md) and the order name the same columns
    assert set(COLUMN_ORDER) == set(SUMMARY)


def test_reading_order_keeps_every_column_and_its_values():
    shuffled = list(reversed(COLUMN_ORDER)) + ["a_new_column"]
    df = pd.DataFrame([{c: i for i, c in enumerate(shuffled)}])
    out = in_reading_order(df)
    assert list(out.columns) == [*COLUMN_ORDER, "a_new_column"]  # an unplaced column follows, kept
    assert out.iloc[0].to_dict() == df.iloc[0].to_dict()
    # a summary without some columns (no model, no sweep yet) keeps the order of those it has
    part = pd.DataFrame(columns=["sweep_id", "time_s", "point", "hlo_op"])
    assert list(in_reading_order(part).columns) == ["point", "time_s", "hlo_op", "sweep_id"]


def test_the_results_page_lists_the_columns_in_that_order():
    text = RESULTS_PAGE.read_text()
    section = text.split("### summary.csv's columns", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert [re.findall(r"`(\w+)`", row) for row in rows] == [list(FIRST_COLUMNS), *map(list, COLUMN_GROUPS.values())]


def test_the_column_dictionary_lists_them_in_the_files_order(tmp_path):
    from analysis.report.columns import write_dictionary

    md = write_dictionary(tmp_path / "columns.md").read_text()
    summary_part = md.split("## summary.csv", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in summary_part.splitlines() if line.startswith("| `")]
    assert listed == list(COLUMN_ORDER)
