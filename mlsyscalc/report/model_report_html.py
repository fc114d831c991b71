"""The report's markdown as one self-contained HTML page: figures inline as PNG data URIs, one
inline stylesheet, no scripts and no URL that the browser would fetch.

It converts the subset of markdown the report writes (headings, paragraphs, bullet lists, fenced
code, tables, images, inline code, bold, italics and in-page links), not markdown in general.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

STYLE = """body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;line-height:1.45}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em}
td.r,th.r{text-align:right}pre{background:#f4f4f4;padding:.6em;overflow-x:auto;font-size:85%}
img{max-width:100%}figure{margin:1em 0}code{background:#f4f4f4}"""

_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)$")
_LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<href>[^)]+)\)")


def slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def _inline(text: str) -> str:
    """Escape, then `code`, **bold**, *italic* and links: in-page anchors stay links, local files become text."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", part)
        part = _LINK.sub(lambda m: (f'<a href="{m["href"]}">{m["text"]}</a>' if m["href"].startswith("#")
                                    else m["text"]), part)
        out.append(part)
    return "".join(out)


def _cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def _table(lines: list[str]) -> str:
    head, rule, *body = lines
    right = ["r" if c.endswith(":") and not c.startswith(":") else "" for c in _cells(rule)]
    row = lambda tag, cells: "<tr>" + "".join(  # noqa: E731
        f'<{tag} class="{a}">{_inline(c)}</{tag}>' if a else f"<{tag}>{_inline(c)}</{tag}>"
        for c, a in zip(cells, right)) + "</tr>"
    return "<table><thead>" + row("th", _cells(head)) + "</thead><tbody>" + "".join(
        row("td", _cells(b)) for b in body) + "</tbody></table>"


def _image(alt: str, src: str, root: Path) -> str:
    path = root / src
    if not path.is_file() or path.suffix.lower() != ".png":
        return f"<p>{_inline(alt)}</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></figure>'


def _blocks(lines: list[str], root: Path):
    """Yield HTML blocks from the markdown lines."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = lines.index("```", i + 1) if "```" in lines[i + 1:] else len(lines)
            yield "<pre><code>" + html.escape("\n".join(lines[i + 1:end])) + "</code></pre>"
            i = end + 1
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            title = line[level:].strip()
            yield f'<h{level} id="{slug(title)}">{_inline(title)}</h{level}>'
            i += 1
        elif line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            yield _table(lines[i:end])
            i = end
        elif line.startswith("- "):
            end = i
            while end < len(lines) and lines[end].startswith("- "):
                end += 1
            yield "<ul>" + "".join(f"<li>{_inline(item[2:])}</li>" for item in lines[i:end]) + "</ul>"
            i = end
        elif m := _IMAGE.match(line):
            yield _image(m["alt"], m["src"], root)
            i += 1
        elif line.strip():
            yield f"<p>{_inline(line)}</p>"
            i += 1
        else:
            i += 1


def markdown_to_html(text: str, root: Path, title: str) -> str:
    body = "\n".join(_blocks(text.splitlines(), root))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")
