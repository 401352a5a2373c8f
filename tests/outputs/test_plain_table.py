"""`analyze`'s console tables (dwtune.outputs.analysis_text.plain_table), drawn by rich.table:
columns as wide as their widest cell, right-aligned, two spaces apart, nothing wrapped, cut or
styled, and text that looks like rich markup printed as written."""

from __future__ import annotations

from dwtune.outputs.analysis_text import plain_table


def test_columns_are_right_aligned_to_their_widest_cell_two_spaces_apart():
    lines = plain_table(
        ["size", "Δ", "status"], [["1e+06", "+0.05 ± 0.003", "[deeper]"], [2, "-", "x"]]
    )
    assert lines == [
        " size              Δ    status",
        "1e+06  +0.05 ± 0.003  [deeper]",
        "    2              -         x",
    ]


def test_a_wide_table_is_neither_wrapped_nor_cut_and_an_empty_one_is_its_header():
    wide = ["x" * 300, "y" * 250]
    assert plain_table(["a", "b"], [wide]) == [" " * 299 + "a  " + " " * 249 + "b", "  ".join(wide)]
    assert plain_table(["only"], []) == ["only"]
