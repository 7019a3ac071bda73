"""`clustersim run` outputs after the simulation: SVG charts (default) checked against summary.json and
trace.json, --charts png|none, trace.json's text, and no matplotlib/pandas/networkx on the default path."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from sim.cli import main

SVG = "{http://www.w3.org/2000/svg}"
SMALL = ["-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "2", "--global-batch", "4", "--seq-length", "1024",
         "--sp", "-q", "-n", "analytical"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("charts") / "run"
    assert main(["run", *SMALL, "-o", str(out)]) == 0
    return out


def _tree(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' ")
    root = ET.fromstring(text.encode("utf-8"))     # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg"
    return root


def _bars(root):
    """(x, y, width, tooltip) of every rect carrying a <title>."""
    out = []
    for r in root.iter(f"{SVG}rect"):
        t = r.find(f"{SVG}title")
        if t is not None:
            out.append((float(r.get("x")), float(r.get("y")), float(r.get("width")), t.text))
    return out


def test_breakdown_svg_matches_the_summary(run_dir):
    s = json.loads((run_dir / "summary.json").read_text())
    T = s["iteration_time_s"]
    root = _tree(run_dir / "breakdown.svg")
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert f"Time breakdown: iteration {T:.6f} s (mean over stages and per stage)" in texts

    def split(d):   # the split in the summary's order; zero parts are not drawn
        parts = [("compute", d["compute_s"])] + [(f"exposed {k}", d["exposed_comm_s"][k])
                                                  for k in ("TP", "CP", "EP", "DP", "PP")]
        return parts + [("overhead", d["overhead_s"]), ("bubble", d["bubble_s"])]

    rows = [("mean (summary)", split(s))] + [(f"stage {st['stage']} (rank {st['rank']})", split(st))
                                             for st in s["stages"]]
    used = {k for _, parts in rows for k, v in parts if v > 0}
    bars = _bars(root)
    assert len(rows) == 3
    for name, parts in rows:
        mine = [b for b in bars if b[3].startswith(f"{name}: ")]
        want = [(k, v) for k, v in parts if v > 0]
        got = [(t[len(name) + 2:].rsplit(" ", 1)[0], float(t.rsplit(" ", 1)[1])) for *_, t in mine]
        assert [k for k, _ in got] == [k for k, _ in want]
        for (_, g), (_, w) in zip(got, want):
            assert g == pytest.approx(w, rel=1e-5)          # tooltips print 6 significant digits
        # one bar: segments side by side, widths in proportion to the seconds
        xs = [b[0] for b in mine]
        ws = [b[2] for b in mine]
        for i in range(1, len(mine)):
            assert xs[i] == pytest.approx(xs[i - 1] + ws[i - 1], abs=0.15)
        px_per_s = (xs[-1] + ws[-1] - xs[0]) / T
        for w, (_, v) in zip(ws, want):
            assert w == pytest.approx(max(v * px_per_s, 0.4), abs=0.6)
        assert len({b[1] for b in mine}) == 1
    assert f"{T:.4f} s" in texts
    legend = [t for t in texts if t in used]
    assert legend and set(legend) == used


def test_timeline_svg_bars_come_from_the_trace(run_dir):
    s = json.loads((run_dir / "summary.json").read_text())
    T = s["iteration_time_s"]
    trace = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    starts: dict[tuple[int, str], list[float]] = {}
    for e in trace:
        # the receive side of pipeline sends is drawn only in trace.json (the sender's stream is charted)
        if e["ph"] == "X" and e["dur"] > 0 and e["cat"] not in ("wait", "overhead") and not e["name"].startswith("recv "):
            starts.setdefault((e["pid"], threads[(e["pid"], e["tid"])]), []).append(e["ts"] * 1e-6)
    root = _tree(run_dir / "timeline.svg")
    lanes = [t.text for t in root.iter(f"{SVG}text") if t.text and t.text.startswith("stage ")]
    want = [f"stage {st['stage']} (rank {st['rank']}) {th}" for st in s["stages"]
            for th in sorted({th for (pid, th) in starts if pid == st["rank"]}, key=lambda x: (x != "compute", x))]
    assert lanes == want
    bars = _bars(root)
    assert len(bars) > 20
    for *_, tip in bars:
        m = re.fullmatch(r"stage (\d+) \(rank (\d+)\) (\S+): (\S+) ([\d.]+)-([\d.]+) s( \(\d+ ops merged\))?", tip)
        assert m, tip
        rank, thread, a, b = int(m[2]), m[3], float(m[5]), float(m[6])
        assert 0 <= a <= b <= T + 1e-6
        # a bar starts where a slice of that rank's stream starts (trace.json, microsecond rounding)
        assert min(abs(x - a) for x in starts[(rank, thread)]) < 2e-6, tip


def test_charts_png_and_none(shared_dir, tmp_path):
    micro = ["-w", str(shared_dir / "data" / "simai_examples" / "microAllReduce.txt"), "-n", "analytical", "-q"]
    png, none = tmp_path / "png", tmp_path / "none"
    assert main(["run", *micro, "--charts", "png", "-o", str(png)]) == 0
    assert sorted(p.name for p in png.iterdir()) == ["EndToEnd.csv", "breakdown.png", "report.html", "summary.json",
                                                     "summary.txt", "timeline.png", "trace.json"]
    assert (png / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --no-charts is --charts none (both may be given when they agree)
    assert main(["run", *micro, "--no-charts", "--charts", "none", "-o", str(none)]) == 0
    assert sorted(p.name for p in none.iterdir()) == ["EndToEnd.csv", "report.html", "summary.json", "summary.txt",
                                                      "trace.json"]
    assert "Drawing skipped (--charts none)" in (none / "report.html").read_text()
    # an old results directory with PNG charts may be replaced by a run with SVG charts
    assert main(["run", *micro, "-o", str(png)]) == 0
    assert {"breakdown.svg", "timeline.svg"} <= {p.name for p in png.iterdir()}


def test_charts_flag_errors(tmp_path, capsys):
    assert main(["run", *SMALL, "--no-charts", "--charts", "png", "-o", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "clustersim: error: --no-charts contradicts --charts png (--no-charts is --charts none)")
    with pytest.raises(SystemExit) as exc:
        main(["run", *SMALL, "--charts", "jpg", "-o", str(tmp_path / "y")])
    assert exc.value.code == 2
    assert "argument --charts: invalid choice: 'jpg'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_trace_json_is_compact_canonical_json(run_dir):
    text = (run_dir / "trace.json").read_text()
    data = json.loads(text)
    # what json.dumps writes with compact separators, byte for byte (no spaces, keys in order)
    assert text == json.dumps(data, separators=(",", ":"))
    x = next(e for e in data["traceEvents"] if e["ph"] == "X" and "args" in e)
    assert list(x) == ["ph", "pid", "tid", "name", "cat", "ts", "dur", "args"]


def test_default_run_imports_no_plotting_dataframes_or_cost_models(shared_dir, tmp_path):
    """The whole default `run` (SimAI file, analytical network, every output) without matplotlib, pandas
    or networkx in the process; without cost/energy flags it imports none of the training-cost models
    (sim.train_flags holds the flags), and the report escapes text without the html package (its
    entity table)."""
    f = shared_dir / "data" / "simai_examples" / "microAllReduce.txt"
    code = ("import sys; from sim.cli import main; "
            f"rc = main(['run', '-w', {str(f)!r}, '-n', 'analytical', '-o', {str(tmp_path / 'r')!r}, '-q']); "
            "print(rc, sorted(m.split('.')[0] for m in sys.modules "
            "if m.split('.')[0] in ('matplotlib', 'pandas', 'networkx')), "
            "sorted(m for m in ('sim.train_cost', 'sim.energy', 'sim.goodput', 'sim.pricing', "
            "'html.entities') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "0 [] []"
    assert {"breakdown.svg", "timeline.svg", "report.html", "trace.json"} <= {p.name for p in (tmp_path / "r").iterdir()}


def test_run_parser_looks_the_version_up_only_when_asked(capsys):
    """Building `run`'s parser does not read the installed distribution (importlib.metadata, ~15 ms);
    --version before a command still prints it."""
    from importlib.metadata import version
    code = ("import sys; before = 'importlib.metadata' in sys.modules; from sim.cli import build_parser; "
            "build_parser(['run']); print(before or 'importlib.metadata' not in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "True"
    with pytest.raises(SystemExit) as exc:
        main(["--version", "run"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"clustersim {version('clustersim')}\n"


def test_trace_slices_are_the_engine_trace_rounded(tmp_path):
    """Every engine trace entry is one slice of trace.json, in order, written as json.dumps writes the
    dict {ph, pid, tid, name, cat, ts, dur[, args]} (both ends rounded to whole nanoseconds)."""
    from sim.commands import run_job
    from sim.report import trace_json
    rep = run_job({"model": "aicb-7", "network": "analytical",
                   "plan": {"tp": 4, "pp": 2, "dp": 1, "global_batch_size": 4, "micro_batch_size": 1,
                            "seq_length": 1024, "sequence_parallel": True}}, trace=True)
    text = trace_json(rep)
    data = json.loads(text)
    tid = {(e["pid"], e["args"]["name"]): e["tid"] for e in data["traceEvents"] if e.get("name") == "thread_name"}
    want = []
    for stage, thread, name, start, dur, cat, *rest in rep.trace:
        ts_ns = round(start * 1e9)
        end_ns = max(round((start + max(dur, 0.0)) * 1e9), ts_ns)
        pid = rep.rep_ranks[stage]
        x = {"ph": "X", "pid": pid, "tid": tid[(pid, thread)], "name": name, "cat": cat, "ts": ts_ns / 1000,
             "dur": (end_ns - ts_ns) / 1000}
        if rest and rest[0]:
            x["args"] = rest[0]
        want.append(json.dumps(x, separators=(",", ":")))
    got = [json.dumps(e, separators=(",", ":")) for e in data["traceEvents"]
           if e["ph"] == "X" and not e["name"].startswith("recv ")]
    assert got == want and len(want) > 1000
    pos = 0
    for w in want:               # and the file holds exactly these texts, in this order
        pos = text.index(w, pos) + len(w)


def test_microsecond_text_is_the_float_repr():
    import random

    from sim.trace_text import us_text, us_texts
    rng = random.Random(7)
    values = [0, 1, 9, 10, 999, 1000, 1001, 123456789, 10**15 - 1, 10**15, 10**16 + 7, 2**53 + 1]
    values += [rng.randrange(0, 10**rng.randrange(1, 18)) for _ in range(20000)]
    for ns in values:
        assert us_text(ns) == repr(ns / 1000), ns
    import numpy as np
    arr = np.array(values[:-3] + [5], dtype=np.int64)
    assert us_texts(arr) == [repr(int(v) / 1000) for v in arr]
