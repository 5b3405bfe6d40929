"""The HTML report renders the Markdown it is written in: *emphasis* as <em>, `code` as <code>
(its asterisks untouched), **bold**, links; a product's spaced asterisks stay asterisks (the
report showed literal *step* and *flagged*). Table cells break inside a word only when the
word alone is too wide, not to squeeze a column ("faile d", "all_gat her")."""

from __future__ import annotations

import pandas as pd

from analysis.report.document import _CSS, Report, _inline


def test_inline_markdown_becomes_html_and_products_stay_products():
    assert _inline("times of the *step* estimator") == "times of the <em>step</em> estimator"
    assert _inline("max(T_min * hops, c * V / W)") == "max(T_min * hops, c * V / W)"
    assert _inline("**bold**, *em*, `a*b*c`") == "<b>bold</b>, <em>em</em>, <code>a*b*c</code>"
    assert _inline("see [the fit](fit.json) of *each* <family>") == (
        'see <a href="fit.json">the fit</a> of <em>each</em> &lt;family&gt;'
    )
    assert _inline("2*3*4 and snake_case_*x*") == "2*3*4 and snake_case_*x*"


def test_a_report_page_has_emphasis_and_unbroken_words_in_its_tables():
    rep = Report("t")
    rep.heading("Points")
    rep.text("Times are the *step* estimator; a *flagged* point is left out.")
    rep.table(pd.DataFrame({"op": ["all_gather"], "status": ["failed"]}))
    page = rep.to_html()
    assert "<em>step</em>" in page and "<em>flagged</em>" in page and "*step*" not in page
    assert "overflow-wrap:anywhere" not in _CSS.split("code{")[0]  # cells: break-word
    assert "th,td{" in _CSS and "overflow-wrap:break-word" in _CSS.split("th,td{")[1].split("}")[0]
