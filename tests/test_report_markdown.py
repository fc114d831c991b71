import pytest

from mlsyscalc.report.markdown import markdown_table


def test_markdown_table_lines_alignment_and_escaping():
    lines = markdown_table(["name", "ms"], [["a|b", 1.5], ["c", None]])
    assert lines == ["| name | ms |", "| :--- | ---: |", "| a\\|b | 1.5 |", "| c |  |"]


def test_markdown_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="2 columns"):
        markdown_table(["a", "b"], [[1]])
