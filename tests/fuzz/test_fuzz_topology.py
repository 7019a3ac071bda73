"""Fuzz the SimAI topology reader (`clustersim topo info FILE`): every mutation of a valid file below
breaks a rule of the format or of the generator (positive finite rates, finite delays, error rate in
[0, 1), ids in range, counts bounded), so each must be refused with file:line and exit 2."""

from __future__ import annotations

import pytest
from fuzzkit import BAD_NUMBERS, CORPUS, refused, refused_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topo
from topo.limits import MAX_CABLES, MAX_NODES
from topo.simai_file import write_simai_topology

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

BAD_COUNTS = BAD_NUMBERS + ("1.5", "-8", "+-1", str(MAX_NODES * 1000), "1e9")
BAD_RATES = ("0Gbps", "-1Gbps", "nanGbps", "infGbps", "1e400Gbps", "1e-400Gbps", "400", "Gbps", "400Gxps",
             "1e999999999999Gbps", "0bps", "", "400 Gbps")
BAD_DELAYS = ("-1ms", "nan", "inf", "1e400ms", "1e999999999999", "xms", "1e400", "-0.0005ms", "0.5xs")
BAD_ERROR_RATES = ("nan", "inf", "-0.1", "1", "1.0", "1.5", "1e400", "x", "-inf", "0.5.5")


@pytest.fixture(scope="module")
def base_lines(tmp_path_factory):
    p = tmp_path_factory.mktemp("topo") / "base.topo"
    write_simai_topology(topo.build("spectrum-x", gpus=16), p)
    return p.read_text().splitlines()


def _write(tmp_path, lines: list[str], name: str = "bad.topo"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_base_file_is_accepted(tmp_path, base_lines, capsys):
    from sim.cli import main
    assert main(["topo", "info", str(_write(tmp_path, base_lines))]) == 0


@FUZZ
@given(field=st.integers(0, 4), bad=st.sampled_from(BAD_COUNTS))
def test_bad_header_count(tmp_path, base_lines, field, bad):
    head = base_lines[0].split()
    head[field] = bad
    p = _write(tmp_path, [" ".join(head)] + base_lines[1:])
    refused("topology", ["topo", "info", str(p)], must_mention=f"{p}:")


@FUZZ
@given(data=st.data(), column=st.integers(0, 4))
def test_bad_cable_field(tmp_path, base_lines, data, column):
    cables = [i for i, ln in enumerate(base_lines) if i >= 2 and not ln.startswith("#")]
    i = data.draw(st.sampled_from(cables))
    toks = base_lines[i].split()
    pool = {0: BAD_NUMBERS + ("100000", toks[1]), 1: BAD_NUMBERS + ("100000", toks[0]),
            2: BAD_RATES, 3: BAD_DELAYS, 4: BAD_ERROR_RATES}[column]
    bad = data.draw(st.sampled_from(pool))
    toks[column] = bad
    lines = list(base_lines)
    lines[i] = " ".join(toks)
    p = _write(tmp_path, lines)
    refused("topology", ["topo", "info", str(p)], must_mention=f"{p}:{i + 1}:")


@FUZZ
@given(data=st.data())
def test_structure_damage(tmp_path, base_lines, data):
    """Cables missing or extra, GPU-GPU cables, wrong field counts, non-UTF-8 bytes, bad trailer lines."""
    lines = list(base_lines)
    cables = [i for i, ln in enumerate(lines) if i >= 2 and not ln.startswith("#")]
    how = data.draw(st.sampled_from(["drop", "extra", "gpu_gpu", "fields", "bytes", "trailer", "switch_ids"]))
    i = data.draw(st.sampled_from(cables))
    raw = None
    if how == "drop":
        del lines[i]
    elif how == "extra":
        lines.insert(cables[-1] + 1, lines[i])
    elif how == "gpu_gpu":
        toks = lines[i].split()
        lines[i] = " ".join(["0", "1"] + toks[2:])
    elif how == "fields":
        toks = lines[i].split()
        n = data.draw(st.sampled_from([1, 2, 3, 4, 6, 9]))
        lines[i] = " ".join((toks * 2)[:n])
    elif how == "switch_ids":
        lines[1] = data.draw(st.sampled_from(["", "0", "16 16", "x", "-1", lines[1] + " 9999", "1.5"]))
    elif how == "trailer":
        lines.append(data.draw(st.sampled_from([
            "#clustersim node switch asw 0-999999999999", "#clustersim node gpu gpu 16",
            "#clustersim node switch asw 3", "#clustersim node warp asw 16",
            "#clustersim cable network 0-99999999999", "#clustersim cable laser 0",
            "#clustersim nvlink_domain_size 0", "#clustersim nvlink_domain_size 100000",
            "#clustersim nvlink_domain_size x", "#clustersim node switch", "#clustersim cable nvlink 5-2"])))
    if how == "bytes":
        text = ("\n".join(lines) + "\n").encode()
        at = data.draw(st.integers(0, len(text)))
        raw = text[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x80\x80", b"\xed\xa0\x80"])) + text[at:]
    p = tmp_path / "bad.topo"
    if raw is not None:
        p.write_bytes(raw)
    else:
        _write(tmp_path, lines)
    refused("topology", ["topo", "info", str(p)], must_mention=f"{p}")


@pytest.mark.parametrize("path", sorted((CORPUS / "topology").glob("*.topo")), ids=lambda p: p.name)
def test_corpus(path):
    refused("topology", ["topo", "info", str(path)], must_mention=f"{path}:")


@pytest.mark.parametrize("header", [
    f"{MAX_NODES * 1000} 8 0 1 1 H100\n{MAX_NODES * 1000 - 1}\n0 {MAX_NODES * 1000 - 1} 400Gbps 0.0005ms 0\n",
    f"9 8 0 1 {MAX_CABLES * 100}\n8\n0 8 400Gbps 0.0005ms 0\n",
    "1000000009 8 0 1000000000 1\n" + "",
    "9 8 0 1 1\n8\n0 8 400Gbps 0.0005ms 0\n#clustersim node switch asw 0-99999999999\n",
])
def test_size_bombs_bounded(tmp_path, header):
    """26-byte files declaring 10^9 nodes: refused before allocation, under 1 GiB and 10 s."""
    p = tmp_path / "bomb.topo"
    p.write_text(header)
    refused_bounded("topology", ["topo", "info", str(p)], must_mention=f"{p}:")
    refused_bounded("topology", ["run", "--model", "llama3-8b", "--topology", str(p), "--out", str(tmp_path / "res")],
                    out=tmp_path / "res", must_mention=f"{p}:")


def test_generator_bombs_bounded(tmp_path):
    out = tmp_path / "g.topo"
    refused_bounded("topology", ["topo", "-topo", "Spectrum-X", "-g", "1000000000", "-o", str(out)], out=out,
                    must_mention="-g: 1000000000 GPUs exceeds the limit")
    refused("topology", ["topo", "-topo", "Spectrum-X", "-g", "8", "-nsps", "1000000000", "-o", str(out)], out=out,
            must_mention="-nsps")
    for flag, bad in (("-bw", "1e400Gbps"), ("-l", "1e400"), ("-nvbw", "infGbps"), ("-er", "nan"),
                      ("-l", "1e999999999999"), ("-apbw", "0Gbps")):
        refused("topology", ["topo", "-topo", "Spectrum-X", "-g", "8", flag, bad, "-o", str(out)], out=out,
                must_mention=flag)


def test_override_lifts_the_bound(tmp_path, monkeypatch):
    """CLUSTERSIM_ALLOW_HUGE=1: the header bound no longer applies (the file then fails on its content)."""
    p = tmp_path / "big.topo"
    p.write_text(f"{MAX_NODES + 9} 8 0 {MAX_NODES + 1} 0\n")
    assert "exceeds the limit" in refused("topology", ["topo", "info", str(p)])
    monkeypatch.setenv("CLUSTERSIM_ALLOW_HUGE", "1")
    assert "exceeds the limit" not in refused("topology", ["topo", "info", str(p)])
