"""report.html (sim.html) of run, compare, sweep, serve: self-contained, numbers equal to summary.json,
tables that reproduce the summary, escaping, chart caps; and (when a chromium binary exists) the pages
load in headless Chromium with zero console errors and zero network requests besides the file."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers_cdp import Browser, find_chromium

from sim.cli import main

SMALL = ["-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "2", "--global-batch", "4", "--seq-length", "1024",
         "--sp", "-q"]


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """The default `clustersim run` (the built-in example, charts and trace on)."""
    out = tmp_path_factory.mktemp("html") / "run"
    assert main(["run", "-q", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "cmp"
    assert main(["compare", *SMALL, "-n", "analytical", "-t", "spectrum-x", "--plan", "tp=2",
                 "--plan", "tp=4", "--train-tokens", "1e9", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def serve_dir(tmp_path_factory):
    """The default `clustersim serve` (1,000 requests)."""
    out = tmp_path_factory.mktemp("html") / "serve"
    assert main(["serve", "-q", "-o", str(out)]) == 0
    return out


TINY = """name: tiny
num_layers: 2
hidden_size: 2048
num_attention_heads: 16
ffn_hidden_size: 8192
vocab_size: 32000
seq_length: 2048
"""


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory):
    """`clustersim cluster`: two interleaved jobs of 16 GPUs on an oversubscribed fabric (they slow down)."""
    d = tmp_path_factory.mktemp("html")
    (d / "tiny.yaml").write_text(TINY)
    job = f"model={d / 'tiny.yaml'},tp=8,dp=2,global_batch_size=4,micro_batch_size=1,placement=interleave"
    out = d / "cluster"
    assert main(["cluster", "--job", f"name=A,{job}", "--job", f"name=B,{job}", "-t",
                 "non-rail:nics_per_asw=16,tor_oversubscription=4", "--top", "3", "-o", str(out)]) == 0
    return out


class Tables(HTMLParser):
    """Tables by id: {"body": [[cell]], "foot": [[cell]], "head": [text]}; a cell is (data-v or None, text).
    Also every data-key -> data-v of headline cards, and every src/href attribute."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str, dict] = {}
        self.keys: dict[str, str] = {}
        self.refs: list[str] = []
        self._t = self._part = self._row = self._cell = None
        self._key = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href"):
            if k in a:
                self.refs.append(a[k])
        if "data-key" in a:
            self.keys[a["data-key"]] = a.get("data-v", "")
        if tag == "table" and a.get("id"):
            self._t = self.tables.setdefault(a["id"], {"head": [], "body": [], "foot": []})
        elif self._t is not None and tag in ("thead", "tbody", "tfoot"):
            self._part = {"thead": "head", "tbody": "body", "tfoot": "foot"}[tag]
        elif self._t is not None and tag == "tr" and self._part in ("body", "foot"):
            self._row = []
            self._t[self._part].append(self._row)
        elif self._t is not None and tag in ("td", "th"):
            self._cell = [a.get("data-v"), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            if self._part == "head":
                self._t["head"].append(self._cell[1])
            elif self._row is not None:
                self._row.append((self._cell[0], self._cell[1]))
            self._cell = None
        elif tag == "table":
            self._t = self._part = self._row = None


def _col(tab: dict, head: str, part: str = "body") -> list[float]:
    i = tab["head"].index(head)
    return [float(r[i][0]) for r in tab[part] if r[i][0] not in (None, "")]


def _foot(tab: dict, head: str) -> float:
    return _col(tab, head, "foot")[0]


def _page(d: Path) -> tuple[str, Tables]:
    text = (d / "report.html").read_text(encoding="utf-8")
    return text, Tables(text)


def _at(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data[part]
    return data


# ------------------------------------------------------------------------------------------------ plain checks
def _assert_self_contained(text: str, parsed: Tables) -> None:
    for ref in parsed.refs:
        assert ref.startswith(("data:", "#")), ref            # no file, http(s) or protocol-relative reference
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "url(" not in text and "@import" not in text
    assert "<script src" not in text.replace(" ", "") and "<link rel='stylesheet'" not in text
    assert "default-src 'none'" in text                      # the CSP forbids any fetch


def test_run_report_is_self_contained_and_headline_equals_summary(run_dir):
    text, p = _page(run_dir)
    _assert_self_contained(text, p)
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("iteration_time_s", "mfu", "tflops_per_gpu", "tokens_per_s_per_gpu", "compute_s",
                "exposed_comm_total_s", "bubble_s", "overhead_s", "memory.peak_reserved_bytes"):
        assert float(p.keys[key]) == _at(summary, key), key     # the full-precision value, not a rounding
    assert f"{summary['iteration_time_s']:.6f} s" in text
    # how the numbers were obtained: backend, kernel DB, provenance shares
    assert "backend &#x27;flow&#x27;" in text and "compute_db &#x27;shipped&#x27;" in text
    for src, share in summary["compute_sources"].items():
        assert f"{src} {100 * share:.1f}%" in text
    # the topology drawing is embedded as a data: SVG (no file beside the page is needed)
    assert "src='data:image/svg+xml;base64,PD94bWwgdmVyc2lvb" in text
    assert "id='stragglers'" not in text            # no stragglers, no faults: no such section


def test_run_report_tables_reproduce_the_summary(run_dir):
    _, p = _page(run_dir)
    s = json.loads((run_dir / "summary.json").read_text())
    n = len(s["stages"])
    st = p.tables["t-stages"]
    assert len(st["body"]) == n == 2
    for head, want in (("compute (s)", s["compute_s"]), ("bubble (s)", s["bubble_s"]),
                       ("overhead (s)", s["overhead_s"]), ("exposed TP (s)", s["exposed_comm_s"]["TP"]),
                       ("exposed DP (s)", s["exposed_comm_s"]["DP"]), ("exposed PP (s)", s["exposed_comm_s"]["PP"])):
        assert math.fsum(_col(st, head)) / n == pytest.approx(want, rel=1e-12), head
        assert _foot(st, head) == want
    # every stage's split sums to the iteration time
    for v in _col(st, "sum (s)"):
        assert v == pytest.approx(s["iteration_time_s"], rel=1e-9)
    ex = p.tables["t-exposed"]
    assert _col(ex, "mean = summary (s)") == [s["exposed_comm_s"][k] for k in ("TP", "CP", "EP", "DP", "PP")]
    assert _foot(ex, "mean = summary (s)") == s["exposed_comm_total_s"]
    kinds = p.tables["t-group-kinds"]
    assert math.fsum(_col(kinds, "mean exposed (s)")) == pytest.approx(math.fsum(s["exposed_by_group_kind_s"].values()))
    # collectives: every operation's exposed wait, summed over stages, is n x the summary's exposed time
    co = p.tables["t-collectives"]
    assert math.fsum(_col(co, "exposed (s)")) / n == pytest.approx(s["exposed_comm_total_s"], rel=1e-9)
    assert sum(_col(co, "count")) > 1000
    # kernel-time provenance: shares per provenance are the summary's compute_sources
    pv = p.tables["t-provenance"]
    total = _foot(pv, "total (s)")
    for src, share in s["compute_sources"].items():
        assert _foot(pv, f"{src} (s)") / total == pytest.approx(share, rel=1e-9)
    # per layer (stage 0): the compute column adds up to stage 0's compute time
    ly = p.tables["t-layers"]
    comp = sum(math.fsum(_col(ly, f"compute {c} (s)")) for c in ("fwd", "ig", "wg"))
    assert comp == pytest.approx(s["stages"][0]["compute_s"], rel=1e-9)
    # memory: the largest reserved stage is the summary's peak
    mem = p.tables["t-memory"]
    assert max(_col(mem, "reserved (GiB)")) == s["memory"]["peak_reserved_bytes"]
    assert [r[-1][1] for r in mem["body"]][s["memory"]["peak_stage"]] == s["memory"]["peak_path"]
    # topology: GPU count and cables
    topo = p.tables["t-topology"]
    assert _foot(topo, "cables") == sum(_col(topo, "cables")) > 32


def test_run_report_timeline_is_capped(run_dir):
    text, _ = _page(run_dir)
    svgs = re.findall(r"<svg .*?</svg>", text, re.S)
    gantt = next(s for s in svgs if "per-stage timeline" in s)
    assert len(re.findall(r"<(rect|line|text|title)\b", gantt)) <= 20000
    assert "stage 1 (rank 16) compute" in gantt and "comm:tp" in gantt


def test_report_without_charts_and_trace_still_complete(tmp_path):
    out = tmp_path / "r"
    assert main(["run", *SMALL, "-n", "analytical", "--no-charts", "--no-trace", "-o", str(out)]) == 0
    text, p = _page(out)
    _assert_self_contained(text, p)
    assert "No timeline" in text and "Drawing skipped (--charts none)" in text
    assert "data:image/" not in text
    assert float(p.keys["iteration_time_s"]) == json.loads((out / "summary.json").read_text())["iteration_time_s"]


def test_compare_report(compare_dir):
    text, p = _page(compare_dir)
    _assert_self_contained(text, p)
    data = json.loads((compare_dir / "compare.json").read_text())
    t = p.tables["t-compare"]
    assert len(t["body"]) == len(data) == 2
    assert _col(t, "iteration (s)") == [d["iteration_time_s"] for d in data]
    assert [(r[0][1], r[1][1]) for r in t["body"]] == [(d["label"]["fabric"], d["label"]["plan"]) for d in data]
    assert float(p.keys["iteration_time_s"]) == min(d["iteration_time_s"] for d in data)
    assert min(_col(t, "vs best")) == 1.0
    assert text.count("<svg ") == 1
    # the per-configuration training estimates (compare.json "training"), full precision in data-v
    tr = p.tables["t-training"]
    assert [(r[0][1], r[1][1]) for r in tr["body"]] == [(d["label"]["fabric"], d["label"]["plan"]) for d in data]
    for head, path in (("goodput", ("goodput", "goodput")), ("$ per iteration", ("iteration_usd",)),
                       ("$ per million tokens", ("usd_per_million_tokens",)),
                       ("facility energy per iteration (kJ)", ("iteration_energy", "facility_j")),
                       ("days to train", ("wall_time_days",)), ("$ to train", ("total_usd",)),
                       ("MWh to train", ("total_facility_mwh",))):
        assert _col(tr, head) == [_at(d["training"], ".".join(path)) for d in data], head
    per = [d["training"]["usd_per_million_tokens"] for d in data]
    assert _col(tr, "$ per token vs best") == [v / min(per) for v in per]


def test_run_report_shows_stragglers_and_faults(tmp_path):
    out = tmp_path / "r"
    assert main(["run", *SMALL, "-n", "analytical", "--no-charts", "--straggler", "5=1.2", "--degrade",
                 "spine:0=0.5", "-o", str(out)]) == 0
    text, p = _page(out)
    _assert_self_contained(text, p)
    s = json.loads((out / "summary.json").read_text())
    sec = s["stragglers"]
    for key in ("stragglers.healthy_iteration_time_s", "stragglers.iteration_time_s", "stragglers.slowdown",
                "stragglers.slow_ranks"):
        assert float(p.keys[key]) == _at(s, key), key
    assert sec["iteration_time_s"] == s["iteration_time_s"] and sec["slowdown"] > 1.0
    ex = p.tables["t-straggler-exposed"]
    assert [r[0][1] for r in ex["body"]] == ["TP", "CP", "EP", "DP", "PP"]
    assert _col(ex, "exposed straggler time (s)") == [sec["exposed_straggler_s"][k] for k in ("TP", "CP", "EP", "DP", "PP")]
    assert _col(p.tables["t-straggler-stages"], "kernel-time factor of its slowest rank") == sec["stage_factors"] == [1.2, 1.0]
    assert _col(p.tables["t-straggler-ranks"], "rank") == [5.0]
    # the faults: in the subtitle and the section, as summary.json's meta names them
    assert s["meta"]["faults"] == "spine:0 at 0.5 of its capacity"
    assert text.count("spine:0 at 0.5 of its capacity") == 2 and "Fabric faults:" in text


def test_cluster_report(cluster_dir):
    text, p = _page(cluster_dir)
    _assert_self_contained(text, p)
    s = json.loads((cluster_dir / "summary.json").read_text())
    t = p.tables["t-jobs"]
    assert [r[0][1] for r in t["body"]] == [j["name"] for j in s["jobs"]] == ["A", "B"]
    for head, key in (("alone (s)", "alone_s"), ("shared (s)", "shared_s"), ("slowdown", "slowdown")):
        assert _col(t, head) == [j[key] for j in s["jobs"]], head
    assert float(p.keys["makespan_s"]) == s["makespan_s"]
    links = p.tables["t-links"]
    assert [r[0][1] for r in links["body"]] == [lk["name"] for lk in s["hot_links"]] and len(links["body"]) == 3
    assert _col(links, "utilisation") == [lk["utilization"] for lk in s["hot_links"]]
    # slowdown bars: per job a bar of its alone time and one of what sharing adds, ending in its slowdown
    bars = next(x for x in re.findall(r"<svg .*?</svg>", text, re.S) if "slowdown per job" in x)
    for j in s["jobs"]:
        assert f"{j['name']}: alone {j['alone_s']:.6g}" in bars and f"{j['slowdown']:.4f}x" in bars
    # cluster.png embedded byte for byte
    import base64
    png = (cluster_dir / "cluster.png").read_bytes()
    assert "src='data:image/png;base64," + base64.b64encode(png).decode("ascii") + "'" in text


def test_topology_svg_output(tmp_path):
    from topo.draw import draw_topology
    from topo.templates import build
    t = build("spectrum-x", gpus=16)
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    draw_topology(t, str(a), fmt="svg")
    draw_topology(t, str(b), fmt="svg")
    svg = a.read_text()
    assert svg.startswith("<?xml") and "<svg " in svg and a.read_bytes() == b.read_bytes()   # no date, fixed ids
    assert ">gpu (16)</text>" in svg                                          # labels kept as text, not glyph paths
    from PIL import Image
    widths = []
    for dpi in (40, 80):
        draw_topology(t, str(tmp_path / f"c{dpi}.png"), dpi=dpi)
        with Image.open(tmp_path / f"c{dpi}.png") as im:
            widths.append(im.size[0])
    assert abs(widths[1] - 2 * widths[0]) <= 1                            # pixels = inches x dpi
    with pytest.raises(ValueError, match="fmt 'jpg' is not one of png, svg"):
        draw_topology(t, str(tmp_path / "d.jpg"), fmt="jpg")
    assert not list(tmp_path.glob(".topo-draw.*"))                         # no temporary file left


def test_labels_are_escaped():
    from sim.commands import run_job
    from sim.html.compare_report import compare_html
    rep = run_job({"model": "aicb-7", "plan": {"tp": 4, "pp": 2, "dp": 2, "global_batch_size": 4, "seq_length": 1024,
                                               "sequence_parallel": True}, "fabric": None, "network": "analytical"})
    evil = "<img src=x onerror=alert(1)>"
    text = compare_html([({"fabric": evil}, rep)])
    assert evil not in text and "&lt;img src=x onerror=alert(1)&gt;" in text


def test_sweep_writes_a_report_beside_the_csv(tmp_path):
    out = tmp_path / "sw.csv"
    assert main(["sweep", *SMALL[:-1], "-n", "analytical", "--grid", "pp=1,2,5", "-j", "1", "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    text, p = _page_file(tmp_path / "sw.html")
    _assert_self_contained(text, p)
    t = p.tables["t-sweep"]
    assert len(t["body"]) == len(rows) == 3
    assert [r[t["head"].index("error")][1] for r in t["body"]] == [r["error"] for r in rows]
    ok = [float(r["iteration_time_s"]) for r in rows if not r["error"]]
    assert sorted(_col(t, "iteration_time_s")) == sorted(ok) and len(ok) == 2


def _page_file(path: Path) -> tuple[str, Tables]:
    text = path.read_text(encoding="utf-8")
    return text, Tables(text)


def test_serve_report(serve_dir):
    text, p = _page(serve_dir)
    _assert_self_contained(text, p)
    s = json.loads((serve_dir / "summary.json").read_text())
    for key in ("metrics.ttft_s.p50", "metrics.ttft_s.p99", "metrics.tbt_s.p50", "metrics.tbt_s.p99",
                "metrics.e2e_s.p50", "metrics.e2e_s.p99", "throughput.requests_per_s.value"):
        assert float(p.keys[key]) == _at(s, key), key
    m = p.tables["t-metrics"]
    assert _col(m, "P90")[:4] == [s["metrics"][k]["p90"] for k in ("ttft_s", "tbt_s", "tpot_s", "e2e_s")]
    req = p.tables["t-requests"]
    assert len(req["body"]) == s["requests"] == 1000
    assert math.fsum(_col(req, "TTFT (s)")) / 1000 == pytest.approx(s["metrics"]["ttft_s"]["mean"], rel=1e-9)
    assert math.fsum(_col(req, "E2E (s)")) / 1000 == pytest.approx(s["metrics"]["e2e_s"]["mean"], rel=1e-9)
    assert sorted(_col(req, "request id")) == list(range(1000))
    assert text.count("<svg ") == 3          # TTFT, TBT and E2E CDFs


def test_importing_sim_html_loads_no_matplotlib_or_pandas():
    code = ("import sys, sim.html, sim.html.page, sim.html.svg, sim.html.run_report, sim.html.compare_report, "
            "sim.html.search_report, sim.html.serve_report; print(sorted(m for m in ('matplotlib', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------ svg helpers
def test_gantt_merges_sub_pixel_spans_and_caps_elements():
    from sim.html.svg import gantt
    # 10,000 back-to-back 1 us kernels in 10 ms: closer than a pixel -> one bar
    spans = [(i * 1e-6, 1e-6, "fwd") for i in range(10000)]
    svg, drawn, total, until = gantt([("lane", spans)], 0.01, {"fwd": "#000"}, "t")
    assert drawn == total == 1 and until == 0.01 and "(10000 ops merged)" in svg
    # 100 lanes of 400 bars 2.5 px apart: 40,000 bars > the 20,000-element budget -> kept in time order
    spans = [(i * 2.5e-3, 1e-4, "fwd") for i in range(400)]
    svg, drawn, total, until = gantt([(f"lane {k}", spans) for k in range(100)], 1.0, {"fwd": "#000"}, "t")
    assert total == 40000 and 5000 < drawn < 10000 and 0 < until < 1.0
    assert len(re.findall(r"<(rect|line|text|title|polyline|circle)\b", svg)) <= 20000
    assert svg.count("<rect ") == drawn


def test_ecdf_and_ticks():
    from sim.html.serve_report import ecdf
    from sim.html.svg import nice_ticks
    xs, ys = ecdf([3.0, 1.0, 2.0, float("nan")])
    assert xs == [1.0, 2.0, 3.0] and ys == pytest.approx([1 / 3, 2 / 3, 1.0])
    xs, ys = ecdf([1.0, 2.0], [3, 1])           # weighted: 3 gaps of 1 s, 1 gap of 2 s
    assert ys == [0.75, 1.0]
    xs, ys = ecdf(list(range(100000)), points=100)
    assert len(xs) <= 101 and ys[-1] == 1.0
    assert nice_ticks(0.0, 0.56) == [0.0, 0.2, 0.4] and nice_ticks(3.0, 7.0, 4) == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]


# ------------------------------------------------------------------------------------------------ browser
def _shot_dir(tmp_path: Path) -> Path:
    d = os.environ.get("CLUSTERSIM_ARTIFACTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return tmp_path


# Under pytest-xdist (`-n 2 --dist loadgroup`, .ci/run) the browser tests share one worker: two headless
# Chromiums at once on the 2-core CI machine once left a DevTools call unanswered for 60 s.
CHROMIUM_ONE_AT_A_TIME = pytest.mark.xdist_group("chromium")


def _check_png(png: bytes) -> None:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    from PIL import Image
    img = Image.open(io.BytesIO(png)).convert("RGB")
    assert img.size == (1280, 1800)
    colours = img.resize((160, 225)).getcolors(maxcolors=100000)
    assert colours is not None and len(colours) > 50          # not a blank, one-colour page


@pytest.mark.slow
@CHROMIUM_ONE_AT_A_TIME
@pytest.mark.parametrize("which", ["run", "compare", "serve", "cluster"])
def test_report_in_headless_chromium(which, request, tmp_path):
    exe = find_chromium()
    if exe is None:
        pytest.skip("no chromium binary found (Debian package `chromium`)")
    d = request.getfixturevalue(f"{which}_dir")
    path = d / "report.html"
    with Browser(exe, tmp_path) as b:
        v = b.visit(path)
        assert v.console_errors == [] and v.exceptions == [] and v.log_errors == []
        # the file itself, nothing else; data: URLs (the embedded topology PNG) are decoded in the page,
        # not fetched, though Chromium lists them among its requests
        assert [u for u in v.requests if not u.startswith("data:")] == [path.resolve().as_uri()]
        text = path.read_text(encoding="utf-8")
        assert all(u in text for u in v.requests if u.startswith("data:"))
        shot = _shot_dir(tmp_path) / f"report_{which}.png"
        shot.write_bytes(v.screenshot)
        _check_png(v.screenshot)
        table = {"run": "t-collectives", "compare": "t-compare", "serve": "t-requests", "cluster": "t-links"}[which]
        col = {"run": 10, "compare": 2, "serve": 5, "cluster": 4}[which]
        # sorting by clicking a header: descending after two clicks, numbers by their data-v
        js = ("(function(){var t=document.getElementById('TABLE');var th=t.tHead.rows[0].cells[COL];"
              "th.click();th.click();return [th.getAttribute('aria-sort'),"
              "Array.prototype.map.call(t.tBodies[0].rows,function(r){"
              "return parseFloat(r.cells[COL].getAttribute('data-v'));})];})()")
        js = js.replace("TABLE", table).replace("COL", str(col))
        state, vals = b.evaluate(js)
        assert state == "descending" and len(vals) > 1
        assert vals == sorted(vals, reverse=True)
        assert b.evaluate("document.querySelectorAll('svg').length") >= 1
        if which in ("run", "cluster"):      # the embedded picture (SVG / PNG data: URL) decodes and has a size
            assert b.evaluate("(function(){var i=document.querySelector('img.topo');"
                              "return i.complete?i.naturalWidth:-1;})()") > 300


@pytest.mark.slow
@CHROMIUM_ONE_AT_A_TIME
def test_browser_check_sees_errors_and_requests(tmp_path):
    """The negative control: a page with a console error, an exception and two fetches is caught."""
    exe = find_chromium()
    if exe is None:
        pytest.skip("no chromium binary found (Debian package `chromium`)")
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><img src='http://127.0.0.1:9/x.png'>"
                   "<script>console.error('boom'); fetch('http://127.0.0.1:9/y').catch(function(){});"
                   "undefinedFunction();</script></body></html>")
    with Browser(exe, tmp_path) as b:
        v = b.visit(bad)
    assert v.console_errors == ["boom"] and len(v.exceptions) == 1
    assert {"http://127.0.0.1:9/x.png", "http://127.0.0.1:9/y"} <= set(v.requests)


def test_search_report(tmp_path):
    out = tmp_path / "s"
    assert main(["search", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8", "--no-confirm",
                 "--topology", "none", "-o", str(out)]) == 0
    text, p = _page(out)
    _assert_self_contained(text, p)
    ranked = list(csv.DictReader(io.StringIO((out / "ranked.csv").read_text())))
    summary = json.loads((out / "summary.json").read_text())
    t = p.tables["t-ranked"]
    assert len(ranked) == summary["feasible"] > 1000 and len(t["body"]) == 1000
    assert f"truncated: the first 1,000 of {len(ranked):,} ranked plans are shown" in text
    assert [r[t["head"].index("plan")][1] for r in t["body"]] == [r["plan"] for r in ranked[:1000]]
    assert _col(t, "iteration_time_s") == [float(r["iteration_time_s"]) for r in ranked[:1000]]
    assert float(p.keys["evaluated"]) == summary["evaluated"] and float(p.keys["feasible"]) == summary["feasible"]
    assert summary["best"] in text
    pareto = next(s for s in re.findall(r"<svg .*?</svg>", text, re.S) if "iteration time vs peak memory" in s)
    assert pareto.count("<circle") >= len(ranked)          # every feasible plan, the front and the best


def test_serve_search_report(tmp_path):
    out = tmp_path / "ss"
    assert main(["serve-search", "-m", "llama3-8b", "--gpu", "H100", "--gpus", "2", "--tp", "1,2", "--scheduler",
                 "vllm", "--requests", "60", "--prefill-tokens", "256", "--decode-tokens", "16", "--slo",
                 "p90:ttft<=0.5", "-q", "-j", "1", "-o", str(out)]) == 0
    text, p = _page(out)
    _assert_self_contained(text, p)
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    summary = json.loads((out / "summary.json").read_text())
    t = p.tables["t-results"]
    assert [r[t["head"].index("deployment")][1] for r in t["body"]] == [r["deployment"] for r in rows]
    assert _col(t, "qps_per_dollar") == [float(r["qps_per_dollar"]) for r in rows if r["qps_per_dollar"]]
    assert float(p.keys["best.qps_per_dollar"]) == float(summary["best"]["qps_per_dollar"])
    assert "QPS per dollar vs latency" in text and text.count("<svg ") == 1


def test_escaping_is_html_escape_with_quotes():
    """The report's and the topology drawing's escaping, written out, equal html.escape(text, quote=True)."""
    import html
    import random

    from sim.html.page import esc
    from topo.draw_svg import _esc
    rng = random.Random(3)
    alphabet = "&<>\"'a \u00e9;#x"
    texts = ["", "&amp;", "<b title='x'>\"q\"</b>", 12, None, 1.5] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(500)]
    for t in texts:
        assert esc(t) == html.escape(str(t), quote=True)
        assert _esc(str(t)) == html.escape(str(t), quote=True)


def test_cdp_call_waits_its_whole_timeout_after_a_pump():
    """pump() shrinks the socket timeout to the rest of its window; a later call() must wait its whole
    timeout again (with 0.05 s left, a slow screenshot or evaluate read as a Chromium stall in CI)."""
    import json as _json

    import helpers_cdp

    class FakeWS:
        def __init__(self):
            self.timeouts, self.sent = [], []

        def settimeout(self, t):
            self.timeouts.append(t)

        def send(self, text):
            self.sent.append(_json.loads(text))

        def recv(self):
            return _json.dumps({"id": self.sent[-1]["id"], "result": {"ok": self.timeouts[-1]}})
    conn = helpers_cdp._Conn.__new__(helpers_cdp._Conn)
    conn.ws, conn.timeout_s, conn.next_id, conn.events = FakeWS(), 60.0, 0, []
    conn.ws.settimeout(0.05)              # what pump(None, 0.5) leaves behind
    assert conn.call("Runtime.evaluate") == {"ok": 60.0}
