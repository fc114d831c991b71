import pytest

from mlsyscalc.report.markdown import markdown_table


def test_markdown_table_lines_alignment_and_escaping():
    lines = markdown_table(["name", "ms"], [["a|b", 1.5], ["c", None]])
    assert lines == ["| name | ms |", "| :--- | ---: |", "| a\\|b | 1.5 |", "| c |  |"]


def test_markdown_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="2 columns"):
        markdown_table(["a", "b"], [[1]])


def test_markdown_table_default_and_given_alignment_and_cell_text():
    assert markdown_table(["a", "b", "c"], [[1, 2.5, "x\ny"]]) == ["| a | b | c |", "| :--- | ---: | ---: |",
                                                                   "| 1 | 2.5 | x y |"]
    assert markdown_table(["a", "b", "c"], [], "lcr")[1] == "| :--- | :---: | ---: |"
    assert markdown_table(["a|b"], [[None]], "l") == ["| a\\|b |", "| :--- |", "|  |"]  # headers are escaped too
    with pytest.raises(ValueError, match="align 'lr' has 2 letters for 3 columns"):
        markdown_table(["a", "b", "c"], [], "lr")
    assert markdown_table(["a", "b"], iter([(1, 2), (3, 4)]))[2:] == ["| 1 | 2 |", "| 3 | 4 |"]  # any iterable
