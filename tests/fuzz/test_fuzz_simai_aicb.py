"""Fuzz the SimAI workload text reader (`clustersim run -w FILE.txt`), the AICB CSV reader
(`run -w FILE.csv`) and the Chakra trace reader (`run -w DIR`): each mutation of a valid exported file
breaks a type, range, finiteness or structure rule (nan/inf/1e400/negative/fractional/text numbers,
dropped or duplicated fields, truncation, non-UTF-8 bytes, corrupt protobuf), so each must be refused
in one line naming the file, exit 2, and no results folder. The unmutated files are accepted."""

from __future__ import annotations

import contextlib
import csv
import io
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from fuzzkit import BAD_NUMBERS, CORPUS, refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
JUNK = (b"\xff", b"\xc3\x28", b"\x80\x80")
BAD_INT = BAD_NUMBERS + ("1.5", "-8", "2.5e0")  # integral float literals (2.0, 1e3) are valid
# header keys of a SimAI file and their bad values (each violates a type or range rule)
HEADER_KEYS = ("model_parallel_NPU_group:", "ep:", "pp:", "vpp:", "ga:", "all_gpus:", "pp_comm:")
HEADER_BAD = BAD_INT + ("0",)
# SimAI matches comm types by prefix (ALLTOALLX is ALLTOALL there), so only non-prefixes are bad
# layer-line columns: 1 reserved, 2/5/8 times in ns, 3/6/9 comm types, 4/7/10 sizes in bytes
TIME_COLS, TYPE_COLS, SIZE_COLS = (2, 5, 8), (3, 6, 9), (4, 7, 10)
BAD_COMM = ("allreduce ", "0", "NaN", "-")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A SimAI file, an AICB CSV and a Chakra folder exported from one small job (LLaMA-3-8B, 2 layers)."""
    from sim.cli import main
    d = tmp_path_factory.mktemp("base")
    argv = ["workload", "--model", "llama3-8b", "--num-layers", "2", "--world-size", "4", "--tp", "2",
            "--gbs", "4", "--mbs", "1", "--seq", "1024", "-o", str(d / "w.json"), "--simai", str(d / "s.txt"),
            "--aicb-csv", str(d / "a.csv")]
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        assert main(argv) == 0, sink.getvalue()
    return d


@pytest.fixture(scope="module")
def chakra_files(files):
    """`files` plus the same job's Chakra folder (ch/); skipped with the reason when mlc-chakra is absent."""
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2",
                        reason="mlc-chakra not installed (pip install --no-deps mlc-chakra protobuf)")
    from sim.cli import main
    argv = ["workload", "--model", "llama3-8b", "--num-layers", "2", "--world-size", "4", "--tp", "2",
            "--gbs", "4", "--mbs", "1", "--seq", "1024", "--chakra", str(files / "ch")]
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        assert main(argv) == 0, sink.getvalue()
    return files


def _run(tmp_path, reader, path, must_mention=None):
    out = Path(tempfile.mkdtemp(dir=tmp_path)) / "res"   # fresh per example: one failure cannot mask others
    return refused(reader, ["run", "-w", str(path), "--out", str(out), "-q"], out=out,
                   must_mention=str(path) if must_mention is None else must_mention)


# --- SimAI workload text ------------------------------------------------------------------------------

def test_base_simai_is_read(files, shared_dir):
    from workload_gen.simai_workload import read_simai_workload
    w = read_simai_workload(files / "s.txt")
    assert (w.plan.tp, w.plan.world_size) == (2, 4)
    real = read_simai_workload(shared_dir / "data" / "simai_examples" / "aicb_gpt7b_128gpu_tp4_ga8.txt")
    assert (real.plan.tp, real.plan.world_size) == (4, 128)


def _simai_parts(files):
    """(header tokens, count line, layer lines as fields); the #clustersim section is kept aside."""
    lines = [ln for ln in (files / "s.txt").read_text().splitlines() if not ln.startswith("#")]
    return lines[0].split(" "), lines[1], [ln.split("\t") for ln in lines[2:]]


def _section(files):
    return [ln for ln in (files / "s.txt").read_text().splitlines() if ln.startswith("#")]


def _write_simai(tmp_path, head, count, rows, section=()):
    p = tmp_path / "bad.txt"
    p.write_text("\n".join([" ".join(head), count] + ["\t".join(r) for r in rows] + list(section)) + "\n")
    return p


@FUZZ
@given(data=st.data())
def test_simai_bad_header(tmp_path, files, data):
    head, count, rows = _simai_parts(files)
    key = data.draw(st.sampled_from(HEADER_KEYS))
    i = head.index(key)
    how = data.draw(st.sampled_from(["value", "value", "value", "drop_value", "dup_key"]))
    if how == "value":
        head[i + 1] = data.draw(st.sampled_from([v for v in HEADER_BAD if key != "pp_comm:" or v != "0"]))
        if head[i + 1] == "":
            head[i + 1] = "''"
    elif how == "drop_value":
        del head[i + 1]
    else:
        head[i + 1:i + 1] = [key, "3"]
    p = _write_simai(tmp_path, head, count, rows, _section(files) if data.draw(st.booleans()) else ())
    assert f"{p}:1" in _run(tmp_path, "simai-workload", p)


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_simai_bad_cell(tmp_path, files, data):
    head, count, rows = _simai_parts(files)
    r = data.draw(st.integers(0, len(rows) - 1))
    col = data.draw(st.sampled_from(TIME_COLS + TYPE_COLS + SIZE_COLS + (1, 11)))
    if col in TYPE_COLS:
        rows[r][col] = data.draw(st.sampled_from(BAD_COMM))
    elif col == 1:   # SimAI's dependency column: any integer is valid there
        rows[r][col] = data.draw(st.sampled_from(["nan", "x", "1.5", "-", "9" * 400]))
    else:
        rows[r][col] = data.draw(st.sampled_from([v for v in BAD_INT if v.strip()] + ["1e400"]))
    p = _write_simai(tmp_path, head, count, rows, _section(files) if data.draw(st.booleans()) else ())
    assert f"{p}:{r + 3}" in _run(tmp_path, "simai-workload", p)


@FUZZ
@given(data=st.data())
def test_simai_bad_structure(tmp_path, files, data):
    head, count, rows = _simai_parts(files)
    how = data.draw(st.sampled_from(["count", "drop_row", "dup_row", "drop_field", "add_field", "policy",
                                     "truncate", "bytes", "empty"]))
    raw = None
    if how == "count":
        count = data.draw(st.sampled_from(BAD_INT + ("0", str(len(rows) + 1), f"{len(rows)} 1")))
    elif how == "drop_row":
        del rows[data.draw(st.integers(0, len(rows) - 1))]
    elif how == "dup_row":
        rows.append(rows[data.draw(st.integers(0, len(rows) - 1))])
    elif how in ("drop_field", "add_field"):
        r = rows[data.draw(st.integers(0, len(rows) - 1))]
        if how == "drop_field":
            del r[data.draw(st.integers(0, len(r) - 1))]
        else:
            r.append("7")
    elif how == "policy":
        head[0] = data.draw(st.sampled_from(["HYBRID_TRANSFORMER", "MICRO2", "", "DATA_X"]))
    else:
        text = ("\n".join([" ".join(head), count] + ["\t".join(r) for r in rows]) + "\n").encode()
        at = data.draw(st.integers(1, len(text) - 1))
        raw = {"truncate": text[:min(at, text.rfind(b"\n", 0, len(text) - 1))],
               "bytes": text[:at] + data.draw(st.sampled_from(JUNK)) + text[at:], "empty": b""}[how]
    p = tmp_path / "bad.txt"
    if raw is None:
        p = _write_simai(tmp_path, head, count, rows)
    else:
        p.write_bytes(raw)
    _run(tmp_path, "simai-workload", p)


@pytest.mark.parametrize("path", sorted((CORPUS / "simai").glob("*.txt")), ids=lambda p: p.name)
def test_simai_corpus(tmp_path, path):
    _run(tmp_path, "simai-workload", path)


# --- AICB CSV -----------------------------------------------------------------------------------------

AICB_BAD = {"comm_group_size": BAD_INT + ("0",), "msg_size": BAD_INT,
            "comm_type": ("CommType.all_to_all_v", "allreduce", "", "CommType."),
            "comm_group": ("CommGroup.world", "tp", "")}


def test_base_aicb_csv_is_read(files):
    from workload_gen.aicb_csv import read_aicb_csv
    w = read_aicb_csv(files / "a.csv")
    assert (w.plan.tp, w.plan.world_size) == (2, 4)


def _aicb_rows(files):
    return list(csv.reader((files / "a.csv").read_text().splitlines()))


def _write_aicb(tmp_path, rows):
    p = tmp_path / "bad.csv"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    p.write_text(buf.getvalue())
    return p


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_aicb_bad_cell(tmp_path, files, data):
    rows = _aicb_rows(files)
    head = rows[0]
    comm = [i for i, r in enumerate(rows) if i and r[0] not in ("CommType.computation", "CommType.epoch_end")]
    r = data.draw(st.sampled_from(comm))
    field = data.draw(st.sampled_from(sorted(AICB_BAD)))
    rows[r][head.index(field)] = data.draw(st.sampled_from(AICB_BAD[field]))
    p = _write_aicb(tmp_path, rows)
    assert f"{p}:{r + 1}" in _run(tmp_path, "aicb-csv", p)


STAGE_JSON_BAD = {"flops": ("NaN", "Infinity", "-1", "1e400", '"x"', "null"),
                  "bytes": ("NaN", "-Infinity", "-1", "1e400", '"1"', "true"),
                  "layer": ("-2", "0.5", "99", '"0"', "null"), "mb": ("-1", "0.5", "99", '"0"'),
                  "chunk": ("-1", "0.5", "7", "null"), "saved_bytes": ("-1", "0.5", "null")}


@settings(FUZZ, max_examples=50)
@given(data=st.data())
def test_aicb_bad_stage_json(tmp_path, files, data):
    """The `stage` column carries the op as JSON after its name: corrupt the JSON or one of its values."""
    rows = _aicb_rows(files)
    si = rows[0].index("stage")
    key = data.draw(st.sampled_from(sorted(STAGE_JSON_BAD) + ["json", "list"]))
    pick = [i for i in range(1, len(rows) - 1) if key in ("json", "list") or f'"{key}":' in rows[i][si]]
    r = data.draw(st.sampled_from(pick))
    name, _, js = rows[r][si].partition(" ")
    if key == "json":
        js = js[:data.draw(st.integers(0, len(js) - 2))]
    elif key == "list":
        js = js.replace('"list":"', '"list":"sideways_', 1)
    else:
        bad = data.draw(st.sampled_from(STAGE_JSON_BAD[key]))
        js = re.sub(rf'"{key}":(-?[\w.+]+|"[^"]*")', f'"{key}":{bad}', js, count=1)
    rows[r][si] = f"{name} {js}"
    p = _write_aicb(tmp_path, rows)
    assert f"{p}:{r + 1}" in _run(tmp_path, "aicb-csv", p)


@FUZZ
@given(data=st.data())
def test_aicb_bad_structure(tmp_path, files, data):
    rows = _aicb_rows(files)
    how = data.draw(st.sampled_from(["drop_column", "dup_column", "header_only", "short_row", "long_row",
                                     "truncate", "bytes"]))
    raw = None
    if how == "drop_column":
        c = data.draw(st.sampled_from([0, 1, 2, 3, 4]))
        rows = [r[:c] + r[c + 1:] for r in rows]
    elif how == "dup_column":
        rows[0][data.draw(st.integers(1, 4))] = rows[0][0]
    elif how == "header_only":
        rows = rows[:1]
    elif how in ("short_row", "long_row"):
        r = data.draw(st.integers(1, len(rows) - 1))
        rows[r] = rows[r][:-2] if how == "short_row" else rows[r] + ["7"]
    else:
        text = (files / "a.csv").read_bytes()
        at = data.draw(st.integers(200, len(text) - 200))
        raw = text[:at] if how == "truncate" else text[:at] + data.draw(st.sampled_from(JUNK)) + text[at:]
    if raw is None:
        p = _write_aicb(tmp_path, rows)
    else:
        p = tmp_path / "bad.csv"
        p.write_bytes(raw)
    _run(tmp_path, "aicb-csv", p)


# --- Chakra execution traces --------------------------------------------------------------------------

def test_base_chakra_is_read(chakra_files):
    from sim.chakra import load_chakra
    w = load_chakra(chakra_files / "ch")
    assert w.plan.world_size == 4


def _message_boundaries(raw: bytes) -> set[int]:
    """Offsets where a length-prefixed (varint) protobuf message of a Chakra stream starts or ends."""
    out, pos = {0}, 0
    while pos < len(raw):
        n = shift = 0
        while True:
            b = raw[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        pos += n
        out.add(pos)
    return out


@FUZZ
@given(data=st.data())
def test_chakra_bad_folder(tmp_path, chakra_files, data):
    d = tmp_path / "ch"
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(chakra_files / "ch", d)
    # a subset of ranks is valid (`--chakra-ranks` writes one); comm_group.json is not read for
    # clustersim-annotated traces (their groups are the plan's), so it is not mutated here
    # a byte flip inside a node's payload can leave a valid (different) trace, and a cut exactly between
    # two length-prefixed messages leaves a valid shorter stream: only cuts inside a message must be refused
    how = data.draw(st.sampled_from(["truncate", "junk", "extra_rank", "empty_et", "no_files"]))
    rank = d / f"clustersim.{data.draw(st.integers(0, 3))}.et"
    raw = rank.read_bytes()
    if how == "truncate":
        bounds = _message_boundaries(raw)
        cut = data.draw(st.integers(1, len(raw) - 1).filter(lambda c: c not in bounds))
        rank.write_bytes(raw[:cut])
    elif how == "junk":
        rank.write_bytes(data.draw(st.binary(min_size=1, max_size=64)))
    elif how == "extra_rank":
        shutil.copy(rank, d / "clustersim.9.et")
    elif how == "empty_et":
        rank.write_bytes(b"")
    else:
        for f in d.glob("*.et"):
            f.unlink()
    _run(tmp_path, "chakra", d, must_mention=str(d))
