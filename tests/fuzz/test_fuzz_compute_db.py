"""Fuzz compute_db's readers: AIOB timing text (`compute-db import-aiob`), the CSV import (`import-csv`)
and user DB files (`--db`). Every input breaks a type, range or finiteness rule, is not UTF-8, or
imports nothing; each must be refused in one line with exit 2 and no DB written."""

from __future__ import annotations

import sqlite3

import pytest
from fuzzkit import CORPUS, refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
AIOB_OK = ["train_iter:10", "Emb:", "    time_gpu_max: 857", "    time_gpu_min: 782", "    time_gpu_avg: 799"]
BAD_TIMES = ("abc", "nan", "-1", "0", "inf", "1e400", "-inf", "", "0x10", "1,5", "9" * 400)
CSV_HEADER = "gpu,key,mean_s,median_s,min_s,std_s,samples,provenance,source"
CSV_ROW = ["H100", "gemm/fwd/bf16/m=4096,n=4096,k=4096", "0.0002", "0.0002", "0.00019", "0.000001", "10",
           "measured", "bench"]
CSV_BAD = {2: BAD_TIMES[:7], 3: BAD_TIMES, 4: BAD_TIMES[:7], 5: ("abc", "nan", "-1", "inf", "1e400"),
           6: ("x", "1e400", "nan"), 7: ("guessed", "MEASURED"), 1: ("gemm", "gemm/fwd/bf16/m=0,n=1,k=1", "x/y",
                                                                  "gemm/fwd/bf16/m=-4,n=4,k=4", "warp/fwd/bf16/m=1")}


def _line(cells) -> str:
    return ",".join(f'"{c}"' for c in cells) + "\n"


def _aiob(tmp_path, text: str | bytes):
    f = tmp_path / "aiob.txt"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    db = tmp_path / "out.sqlite"
    return refused("compute-db", ["compute-db", "import-aiob", "--db", str(db), "--gpu", "H100", "--model",
                                  "llama3-8b", str(f)], out=db, must_mention=str(f))


def _csv(tmp_path, text: str | bytes):
    f = tmp_path / "rows.csv"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    db = tmp_path / "out.sqlite"
    return refused("compute-db", ["compute-db", "import-csv", "--db", str(db), str(f)], out=db, must_mention=str(f))


def test_valid_inputs_import(tmp_path, capsys):
    from sim.cli import main
    (tmp_path / "a.txt").write_text("\n".join(AIOB_OK) + "\n")
    (tmp_path / "r.csv").write_text(CSV_HEADER + "\n" + _line(CSV_ROW))
    assert main(["compute-db", "import-aiob", "--db", str(tmp_path / "a.sqlite"), "--gpu", "H100", "--model",
                 "llama3-8b", str(tmp_path / "a.txt")]) == 0
    assert main(["compute-db", "import-csv", "--db", str(tmp_path / "c.sqlite"), str(tmp_path / "r.csv")]) == 0


@FUZZ
@given(line=st.integers(2, 4), bad=st.sampled_from(BAD_TIMES))
def test_aiob_bad_time(tmp_path, line, bad):
    lines = list(AIOB_OK)
    lines[line] = lines[line].split(":")[0] + ": " + bad
    assert f":{line + 1}:" in _aiob(tmp_path, "\n".join(lines) + "\n")


@FUZZ
@given(data=st.data())
def test_aiob_bad_structure(tmp_path, data):
    how = data.draw(st.sampled_from(["header", "no_kernels", "no_avg", "orphan_stat", "bytes", "junk_line"]))
    lines = list(AIOB_OK)
    if how == "header":
        lines[0] = data.draw(st.sampled_from(["train_iter:x", "iter:10", "", "train_iter:" + "9" * 5000]))
    elif how == "no_kernels":
        lines = lines[:1]
    elif how == "no_avg":
        del lines[4]
    elif how == "orphan_stat":
        lines.insert(1, "    time_gpu_avg: 5")
    elif how == "junk_line":
        lines.insert(data.draw(st.integers(1, 5)), data.draw(st.sampled_from(["garbage", "a b c", "time_gpu_avg 5"])))
    if how == "bytes":
        text = ("\n".join(lines) + "\n").encode()
        at = data.draw(st.integers(0, len(text)))
        _aiob(tmp_path, text[:at] + b"\xff" + text[at:])
    else:
        _aiob(tmp_path, "\n".join(lines) + "\n")


@settings(FUZZ, max_examples=70)
@given(data=st.data())
def test_csv_bad_cell(tmp_path, data):
    col = data.draw(st.sampled_from(sorted(CSV_BAD)))
    row = list(CSV_ROW)
    row[col] = data.draw(st.sampled_from(CSV_BAD[col]))
    text = CSV_HEADER + "\n" + _line(CSV_ROW) + _line(row)
    assert ":3:" in _csv(tmp_path, text)


@FUZZ
@given(how=st.sampled_from(["header_only", "missing_cols", "empty", "bytes", "unterminated"]), at=st.integers(0, 100))
def test_csv_bad_structure(tmp_path, how, at):
    good = CSV_HEADER + "\n" + _line(CSV_ROW)
    text = {"header_only": CSV_HEADER + "\n", "missing_cols": "gpu,key\nH100,gemm/fwd/bf16/m=1,n=1,k=1\n",
            "empty": "", "unterminated": good + 'H100,"gemm'}.get(how)
    if how == "bytes":
        raw = good.encode()
        text = raw[:at] + b"\xc3\x28" + raw[at:]
    _csv(tmp_path, text)


@pytest.mark.parametrize("path", sorted((CORPUS / "compute_db").glob("*")), ids=lambda p: p.name)
def test_corpus(tmp_path, path):
    db = tmp_path / "out.sqlite"
    cmd = ["import-aiob", "--db", str(db), "--gpu", "H100", "--model", "llama3-8b"] if path.suffix == ".txt" \
        else ["import-csv", "--db", str(db)]
    refused("compute-db", ["compute-db", *cmd, str(path)], out=db, must_mention=str(path))


@pytest.fixture(scope="module")
def bad_dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("dbs")
    c = sqlite3.connect(d / "missing_columns.sqlite")
    c.execute("CREATE TABLE kernels (gpu TEXT, key TEXT)")
    c.commit()
    c.close()
    (d / "not_sqlite.sqlite").write_bytes(b"hello, this is not SQLite\n" * 10)
    from sim.cli import main
    good = d / "good.csv"
    good.write_text(CSV_HEADER + "\n" + _line(CSV_ROW))
    for name, value in (("text_time", "'abc'"), ("nan_time", "'nan'"), ("negative_time", "-1")):
        p = d / f"{name}.sqlite"
        assert main(["compute-db", "import-csv", "--db", str(p), str(good)]) == 0
        c = sqlite3.connect(p)
        c.execute(f"UPDATE kernels SET median_s = {value}")
        c.commit()
        c.close()
    return d


@pytest.mark.parametrize("name", ["missing_columns", "not_sqlite", "text_time", "nan_time", "negative_time"])
@pytest.mark.parametrize("command", ["info", "export"])
def test_bad_db_files(tmp_path, bad_dbs, name, command):
    db = bad_dbs / f"{name}.sqlite"
    out = tmp_path / "x.csv"
    argv = ["compute-db", "info", "--db", str(db)] if command == "info" and name in ("missing_columns", "not_sqlite") \
        else ["compute-db", "export-csv", "--db", str(db), "--out", str(out)]
    refused("compute-db", argv, out=out, must_mention=str(db))
