"""The report's HTML writer (mlsyscalc/report/model_report_html.py) on small markdown inputs: each block kind
it converts, written out by hand as the HTML a browser gets (headings with GitHub anchors, paragraphs, lists,
fenced code, tables with their alignment, inline PNG figures, links, emphasis and escaping)."""

from __future__ import annotations

import base64

import pytest

from mlsyscalc.report.model_report_html import STYLE, markdown_to_html, slug


def _body(markdown: str, root=None) -> str:
    page = markdown_to_html(markdown, root, "t")
    return page.split("<body>\n", 1)[1].rsplit("\n</body>", 1)[0]


def test_page_frame_escapes_the_title_and_inlines_the_style(tmp_path):
    page = markdown_to_html("hello", tmp_path, 'a <b> & "c"')
    assert page == ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                    '<title>a &lt;b&gt; &amp; &quot;c&quot;</title>'
                    f"<style>{STYLE}</style></head>\n<body>\n<p>hello</p>\n</body></html>\n")
    assert "<script" not in page and "http" not in page


@pytest.mark.parametrize("title,anchor", [("Serving", "serving"), ("Memory, training (ZeRO-3)", "memory-training-zero-3"),
                                          ("What it costs: 8 x H100", "what-it-costs-8-x-h100"),
                                          ("a_b-c", "a_b-c")])
def test_slug_is_githubs_anchor(title, anchor):
    assert slug(title) == anchor


def test_headings_keep_their_level_and_anchor():
    assert _body("# Top\n## Two words\n### Third *level*") == (
        '<h1 id="top">Top</h1>\n<h2 id="two-words">Two words</h2>\n'
        '<h3 id="third-level">Third <em>level</em></h3>')


def test_paragraphs_and_lists():
    text = "first line\n\n- one\n- two `x<y`\nafter\n\n\n- again"
    assert _body(text) == ("<p>first line</p>\n<ul><li>one</li><li>two <code>x&lt;y</code></li></ul>\n"
                           "<p>after</p>\n<ul><li>again</li></ul>")


def test_fenced_code_is_escaped_kept_verbatim_and_ends_at_its_fence():
    text = "```bash\nmlsys report a <b> & c\n  **not bold**\n```\nafter the block\n```\nlast"
    assert _body(text) == ("<pre><code>mlsys report a &lt;b&gt; &amp; c\n  **not bold**</code></pre>\n"
                           "<p>after the block</p>\n<pre><code>last</code></pre>")  # an open fence runs to the end
    assert _body("```\n```\nx") == "<pre><code></code></pre>\n<p>x</p>"


def test_table_cells_alignment_and_escaped_pipes():
    text = ("| name | GiB | note |\n| --- | ---: | :---: |\n| a \\| b | 1.5 | **x** |\n| `c\\|d` | 20 | <i> |\n"
            "after")
    assert _body(text) == (
        '<table><thead><tr><th>name</th><th class="r">GiB</th><th>note</th></tr></thead><tbody>'
        '<tr><td>a | b</td><td class="r">1.5</td><td><strong>x</strong></td></tr>'
        '<tr><td><code>c|d</code></td><td class="r">20</td><td>&lt;i&gt;</td></tr>'
        "</tbody></table>\n<p>after</p>")


def test_a_png_figure_is_inlined_and_other_images_become_their_alt_text(tmp_path):
    png = b"\x89PNG\r\n\x1a\n-bytes-"
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.png").write_bytes(png)
    (tmp_path / "figures" / "b.svg").write_text("<svg/>")
    text = "![memory \"bars\" <1>](figures/a.png)\n![vector](figures/b.svg)\n![gone](figures/c.png)"
    data = base64.b64encode(png).decode("ascii")
    assert _body(text, tmp_path) == (
        f'<figure><img alt="memory &quot;bars&quot; &lt;1&gt;" src="data:image/png;base64,{data}"></figure>\n'
        "<p>vector</p>\n<p>gone</p>")
    assert _body("see ![x](figures/a.png) inline", tmp_path) == "<p>see !x inline</p>"  # not an image line


def test_links_in_page_stay_links_and_files_become_text():
    text = "see [Serving](#serving) and [the rows](rows.jsonl) or [web](https://example.com)"
    assert _body(text) == '<p>see <a href="#serving">Serving</a> and the rows or web</p>'


def test_emphasis_and_escaping_inline():
    assert _body("a **b** *c* 2*3*4 x * y * z <tag> & `**code**`") == (
        "<p>a <strong>b</strong> <em>c</em> 2*3*4 x * y * z &lt;tag&gt; &amp; <code>**code**</code></p>")
    assert _body("quote \"this\" 'and'") == "<p>quote \"this\" 'and'</p>"
    assert _body("a ` b") == "<p>a ` b</p>"  # a lone backtick is text


def test_a_list_of_three_items_ends_at_the_first_other_line():
    assert _body("- a\n- b\n- c\nafter\n- d") == ("<ul><li>a</li><li>b</li><li>c</li></ul>\n<p>after</p>\n"
                                                 "<ul><li>d</li></ul>")
    assert _body("| x |\n| --- |\n| 1 |\n| 2 |\n| 3 |\nend") == (
        "<table><thead><tr><th>x</th></tr></thead><tbody><tr><td>1</td></tr><tr><td>2</td></tr><tr><td>3</td></tr>"
        "</tbody></table>\n<p>end</p>")
