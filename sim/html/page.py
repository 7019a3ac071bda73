"""Page shell of the HTML reports: document, sections, headline cards, sortable tables, inline CSS and JS.

Every text that reaches the page is escaped as html.escape(text, quote=True) does (esc). Numbers in
cards and table cells carry their full-precision value in a `data-v` attribute (Python repr of the
float, "" when unknown): the sort script orders by it, and tests compare it with summary.json. The
page's Content-Security-Policy allows only inline styles/scripts and data: images, so a page can never
fetch anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_CSS = """
:root{--fg:#1d2330;--mute:#5b6475;--line:#d9dee7;--bg:#fff;--band:#f5f7fa;--accent:#2f5d9e}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
background:var(--bg);margin:0}
header{background:#1f3b63;color:#fff;padding:14px 24px}
header h1{font-size:20px;margin:0 0 4px}
header p{margin:0;color:#d6e2f3;font-size:13px}
main{max-width:1280px;margin:0 auto;padding:8px 24px 40px}
section{margin:22px 0}
h2{font-size:16px;border-bottom:2px solid var(--line);padding-bottom:4px;margin:0 0 10px}
p.note,div.note{color:var(--mute);font-size:12.5px;margin:4px 0 8px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:10px}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 10px;background:var(--band)}
.card .k{color:var(--mute);font-size:12px}
.card .v{font-size:20px;font-weight:600;margin:2px 0}
.card .h{color:var(--mute);font-size:11.5px;overflow-wrap:anywhere}
.tw{max-height:520px;overflow:auto;border:1px solid var(--line);border-radius:4px}
table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th:first-child,td:first-child,td.t,th.t{text-align:left}
thead th{position:sticky;top:0;background:#e9eef5;z-index:1}
table.sortable thead th{cursor:pointer;user-select:none}
table.sortable thead th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}
table.sortable thead th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
tbody tr:nth-child(even){background:var(--band)}
tfoot td{font-weight:600;border-top:2px solid #aab4c3;background:#eef2f7;position:sticky;bottom:0}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:4px 0}
.legend span i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
svg{display:block;max-width:100%;height:auto}
svg text{font-family:inherit}
img.topo{max-width:100%;border:1px solid var(--line)}
dl.how{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:12.5px;margin:0}
dl.how dt{color:var(--mute)}
dl.how dd{margin:0}
"""

# Click a header: sort the body rows by that column (numbers by data-v, unknowns last; else text).
_JS = """
(function(){
function val(c){var v=c.getAttribute('data-v');return (v===null||v==='')?NaN:parseFloat(v);}
function sortBy(t,th,i){
  var tb=t.tBodies[0],rows=Array.prototype.slice.call(tb.rows);
  var asc=th.getAttribute('aria-sort')!=='ascending';
  Array.prototype.forEach.call(t.tHead.rows[0].cells,function(h){h.removeAttribute('aria-sort');});
  th.setAttribute('aria-sort',asc?'ascending':'descending');
  var num=th.getAttribute('data-num')==='1';
  rows.sort(function(a,b){
    var x=a.cells[i],y=b.cells[i],c;
    if(num){var p=val(x),q=val(y);
      if(isNaN(p)||isNaN(q)){return (isNaN(p)?1:0)-(isNaN(q)?1:0);}
      c=p-q;}
    else{c=x.textContent.localeCompare(y.textContent,undefined,{numeric:true});}
    return asc?c:-c;});
  rows.forEach(function(r){tb.appendChild(r);});
}
Array.prototype.forEach.call(document.querySelectorAll('table.sortable'),function(t){
  if(!t.tHead||!t.tBodies.length){return;}
  Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,i){
    th.addEventListener('click',function(){sortBy(t,th,i);});});
});
})();
"""

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'")


def esc(x) -> str:
    """str(x) escaped for HTML text and attribute values: html.escape(str(x), quote=True), written out
    (the html package imports its entity table, ~3 ms of every run's start-up)."""
    return (str(x).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def number(x) -> float | None:
    """x as a finite float, or None (unknown, NaN, inf, or not a number; bools are not numbers)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def fmt(x, spec: str = ".4g", unit: str = "") -> str:
    v = number(x)
    if v is None:
        return "n/a"
    return f"{v:{spec}}{unit}"


def data_v(x) -> str:
    v = number(x)
    return "" if v is None else repr(v)


@dataclass(frozen=True)
class Card:
    """A headline number: label, raw value (seconds, fractions ... as in summary.json), shown text, how
    it was obtained, and the summary.json key it equals (data-key)."""
    label: str
    value: object
    text: str
    how: str = ""
    key: str = ""


def cards(items: Sequence[Card]) -> str:
    out = ["<div class='cards'>"]
    for c in items:
        key = f" data-key='{esc(c.key)}'" if c.key else ""
        out.append(f"<div class='card'><div class='k'>{esc(c.label)}</div>"
                   f"<div class='v'{key} data-v='{data_v(c.value)}'>{esc(c.text)}</div>"
                   + (f"<div class='h'>{esc(c.how)}</div>" if c.how else "") + "</div>")
    out.append("</div>")
    return "".join(out)


def how_list(items: Sequence[tuple[str, str]]) -> str:
    """A definition list: (what, how it was obtained)."""
    return "<dl class='how'>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items) + "</dl>"


@dataclass(frozen=True)
class Col:
    """Table column: header, number format spec (None: text column), unit shown after numbers,
    scale applied to the shown text only (data-v keeps the raw value), header tooltip."""
    head: str
    spec: str | None = ".4g"
    unit: str = ""
    scale: float = 1.0
    tip: str = ""


def _cell(col: Col, x) -> str:
    if col.spec is None:
        return f"<td class='t'>{esc('' if x is None else x)}</td>"
    v = number(x)
    if v is None:
        shown = "" if x is None else (x if isinstance(x, str) else str(x) if isinstance(x, bool) else "n/a")
        return f"<td data-v=''>{esc(shown)}</td>"
    return f"<td data-v='{repr(v)}'>{esc(f'{v * col.scale:{col.spec}}{col.unit}')}</td>"


def table(cols: Sequence[Col], rows: Sequence[Sequence], *, table_id: str, foot: Sequence | None = None,
          cap: int | None = None, what: str = "rows") -> str:
    """A sortable table (rows of raw values, one per column). foot: a totals row (not sorted).
    cap: show only the first `cap` rows and say so."""
    n = len(rows)
    shown = rows if cap is None or n <= cap else rows[:cap]
    head = "".join(f"<th data-num='{0 if c.spec is None else 1}'"
                   + (f" title='{esc(c.tip)}'" if c.tip else "")
                   + (" class='t'" if c.spec is None else "") + f">{esc(c.head)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(_cell(c, x) for c, x in zip(cols, r)) + "</tr>" for r in shown)
    tfoot = ""
    if foot is not None:
        tfoot = "<tfoot><tr>" + "".join(_cell(c, x) for c, x in zip(cols, foot)) + "</tr></tfoot>"
    note = ""
    if len(shown) < n:
        note = f"<p class='note'>truncated: the first {len(shown):,} of {n:,} {esc(what)} are shown.</p>"
    return (f"{note}<div class='tw'><table class='sortable' id='{esc(table_id)}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody>{tfoot}</table></div>")


def legend(items: Sequence[tuple[str, str]]) -> str:
    """(label, colour) chips."""
    return "<div class='legend'>" + "".join(
        f"<span><i style='background:{esc(c)}'></i>{esc(lab)}</span>" for lab, c in items) + "</div>"


def section(title: str, body: str, sid: str = "", note: str = "") -> str:
    ident = f" id='{esc(sid)}'" if sid else ""
    return (f"<section{ident}><h2>{esc(title)}</h2>" + (f"<p class='note'>{esc(note)}</p>" if note else "")
            + body + "</section>")


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    """The complete document."""
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<link rel='icon' href='data:,'>"
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
            f"<header><h1>{esc(title)}</h1><p>{esc(subtitle)}</p></header><main>"
            + "".join(sections)
            + "<p class='note'>Generated by clustersim. Click a column header to sort a table.</p>"
            f"</main><script>{_JS}</script></body></html>\n")


def fmt_bytes(x) -> str:
    v = number(x)
    return "n/a" if v is None else f"{v / 2**30:.2f} GiB"


def rows_total(rows: Sequence[Sequence], idx: Sequence[int], label_cols: int = 1, label: str = "total",
               agg: Callable[[list[float]], float] = sum) -> list:
    """A totals row: `label` in the first column, agg over the given column indexes, blank elsewhere."""
    out: list = [""] * (len(rows[0]) if rows else max(idx, default=0) + 1)
    out[0] = label
    for i in idx:
        vals = [number(r[i]) for r in rows]
        out[i] = agg([v for v in vals if v is not None])
    return out
