"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML page.

The only code that renders reports; analyzers hand it tables and figure paths.

Both renderings come from the same blocks, so report.md and index.html never disagree.
The HTML embeds its figures (base64 PNG) and has a table of contents: it opens from disk
with no network.
"""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

# Fits a 1280-px page: the body stops at 1200 px, tables wrap long cells, figures scale down.
# Cells break inside a word only where the word alone is wider than the page (break-word, not
# anywhere: with anywhere the browser squeezed narrow columns to "faile d", "all_gat her").
_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;overflow-wrap:break-word;vertical-align:top}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%}
code{background:#f3f3f3;padding:1px 3px;overflow-wrap:anywhere}.note{color:#555}
nav{background:#fafafa;border:1px solid #ddd;padding:.5em 1em}.incomplete{background:#fff3cd;padding:.5em 1em}"""


@dataclass(frozen=True)
class Link:
    """A table cell that links somewhere (relative to the report folder)."""

    text: str
    href: str

    def __str__(self) -> str:
        return f"[{self.text}]({self.href})"


def fmt(value) -> str:
    """Numbers to short human strings: 3 significant digits, engineering-friendly."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, Link):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:.3g}"
    return str(value)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


MAX_ROWS = 60  # a table longer than this shows its ends only


@dataclass
class Report:
    title: str
    blocks: list[tuple] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def text(self, markdown_text: str) -> None:
        """A paragraph. Inline `code` and **bold** are rendered in HTML too."""
        self.blocks.append(("p", markdown_text))

    def banner(self, css_class: str, markdown_text: str) -> None:
        """A highlighted paragraph (e.g. ``incomplete``), a quoted paragraph in Markdown."""
        self.blocks.append(("div", css_class, markdown_text))

    def table(self, df: pd.DataFrame, max_rows: int = MAX_ROWS) -> None:
        """A table. Longer than ``max_rows``, it shows its first and last rows and says how
        many it left out (a report summarises; the CSV files beside it hold every row)."""
        df = df.reset_index(drop=True)
        if len(df) > max_rows:
            k = max_rows // 2
            gap = pd.DataFrame([["..."] * len(df.columns)], columns=df.columns).astype(object)
            shown = pd.concat([df.iloc[:k].astype(object), gap, df.iloc[-k:].astype(object)], ignore_index=True)
            self.blocks.append(("table", shown))
            self.text(f"*{len(df)} rows: the first and last {k} shown; the CSV files beside this report hold all.*")
            return
        self.blocks.append(("table", df))

    def figure(self, path: Path, caption: str) -> None:
        self.blocks.append(("figure", Path(path), caption))

    def to_markdown(self, rel_to: Path) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if b[0] == "h2":
                out += [f"## {b[1]}", ""]
            elif b[0] == "p":
                out += [b[1], ""]
            elif b[0] == "div":
                out += [f"> {b[2]}", ""]
            elif b[0] == "table":
                df = b[1]
                out.append("| " + " | ".join(map(str, df.columns)) + " |")
                out.append("|" + "---|" * len(df.columns))
                for row in df.itertuples(index=False):
                    # a cell is one line: a multi-line error would end the table
                    out.append("| " + " | ".join(" ".join(fmt(v).split()).replace("|", "\\|") for v in row) + " |")
                out.append("")
            elif b[0] == "figure":
                out += [f"![{b[2]}]({b[1].relative_to(rel_to).as_posix()})", "", f"*{b[2]}*", ""]
        return "\n".join(out)

    def to_html(self) -> str:
        toc = [f'<li><a href="#{_slug(b[1])}">{html.escape(b[1])}</a></li>' for b in self.blocks if b[0] == "h2"]
        body = []
        for b in self.blocks:
            if b[0] == "h2":
                body.append(f'<h2 id="{_slug(b[1])}">{html.escape(b[1])}</h2>')
            elif b[0] == "p":
                body.append(f"<p>{_inline(b[1])}</p>")
            elif b[0] == "div":
                body.append(f'<div class="{b[1]}">{_inline(b[2])}</div>')
            elif b[0] == "table":
                body.append(_html_table(b[1]))
            elif b[0] == "figure":
                data = base64.b64encode(b[1].read_bytes()).decode()
                body.append(
                    f'<figure><img alt="{html.escape(b[2])}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{html.escape(b[2])}</figcaption></figure>"
                )
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(self.title)}</h1>"
            f"<nav><b>Contents</b><ul>{''.join(toc)}</ul></nav>{''.join(body)}</body></html>"
        )


def _inline(text: str) -> str:
    """Markdown's inline `code`, **bold**, *emphasis* and [links](href), as HTML (the rest
    escaped). An asterisk with a space on either side is a product (``T_min * hops``), not
    emphasis; nothing inside `code` is touched."""
    t = html.escape(text)
    codes: list[str] = []

    def stash(m: re.Match) -> str:  # code spans keep their asterisks
        codes.append(m.group(1))
        return f"\x00{len(codes) - 1}\x00"

    t = re.sub(r"`([^`]+)`", stash, t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)
    t = re.sub(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])", r"<em>\1</em>", t)
    t = re.sub(r"\x00(\d+)\x00", lambda m: f"<code>{codes[int(m.group(1))]}</code>", t)
    t = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', t)
    return t.replace("\n\n", "<br><br>")


def _html_table(df: pd.DataFrame) -> str:
    """A table, every cell escaped except :class:`Link` cells, which become anchors."""

    def cell(v) -> str:
        if isinstance(v, Link):
            return f'<a href="{html.escape(v.href)}">{html.escape(v.text)}</a>'
        return html.escape(fmt(v))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
