"""HTML tables with spanning cells (ingest/markup.py ``spread_spans``, issue 51): a span's text in every
cell it covers, nested tables left to their own, and a table whose spans would explode left as it is."""

from __future__ import annotations

from ingest.markup import html_to_text


def test_a_cell_spanning_columns_and_rows_is_in_each_cell_it_covers():
    html = (
        "<table><tr><th></th><th>Q1</th><th>Q2</th><th>Q3</th></tr>"
        "<tr><td rowspan=2>North</td><td colspan=2>closed</td><td>4</td></tr>"
        "<tr><td>1</td><td>2</td><td>3</td></tr></table>"
    )
    assert html_to_text(html).splitlines() == [
        "|  | Q1 | Q2 | Q3 |",
        "| --- | --- | --- | --- |",
        "| North | closed | closed | 4 |",
        "| North | 1 | 2 | 3 |",
    ]


def test_a_nested_table_keeps_its_own_spans_and_a_huge_span_is_left_alone():
    inner = "<table><tr><td colspan=2>in</td></tr><tr><td>x</td><td>y</td></tr></table>"
    nested = f"<table><tr><td>a{inner}</td></tr></table>"
    assert "| in | in |" in html_to_text(nested)
    huge = "<table><tr><td colspan=1000 rowspan=65534>bomb</td></tr>" + "<tr><td>r</td></tr>" * 20 + "</table>"
    assert html_to_text(huge).count("bomb") == 1, "more than MAX_SPREAD cells: its spans stay as they were"
