"""sim.tables: the YAML reading, number checks and GPU-row lookup shared by the price, power and failure
tables (one-line errors naming the file, line or field)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sim.errors import SimError
from sim.tables import find_gpu_row, gpu_names, number, read_yaml, text_field


def test_read_yaml_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("a: 1\nb: [2\n")
    with pytest.raises(SimError) as e:
        read_yaml(bad, "price table")
    assert str(e.value).startswith(f"{bad}:3: not valid YAML") and "\n" not in str(e.value)
    latin = tmp_path / "l.yaml"
    latin.write_bytes(b"a: \xe9\n")
    with pytest.raises(SimError, match=r"l.yaml: the power table is not UTF-8 text"):
        read_yaml(latin, "power table")
    with pytest.raises(SimError, match=r"cannot read the failure model"):
        read_yaml(tmp_path / "missing.yaml", "failure model")


@pytest.mark.parametrize("value,kwargs,message", [
    (0, {}, "f: must be a number > 0 (got 0)"),
    (-1, {"strict": False}, "f: must be a number >= 0 (got -1)"),
    (0.5, {"minimum": 1.0, "strict": False}, "f: must be a number >= 1 (got 0.5)"),
    (True, {}, "f: must be a number > 0 (got True)"),
    (float("nan"), {}, "f: must be a number > 0 (got nan)"),
    ("3", {}, "f: must be a number > 0 (got '3')"),
])
def test_number_rejects(value, kwargs, message):
    with pytest.raises(SimError) as e:
        number(value, "f", **kwargs)
    assert str(e.value) == message


def test_number_and_text_accept():
    assert number(0, "f", strict=False) == 0.0 and number(1, "f", minimum=1.0, strict=False) == 1.0
    assert text_field({"source": "  datasheet "}, "source", "w", "why") == "datasheet"
    with pytest.raises(SimError, match=r"^w.date: missing \(every price has a date\)$"):
        text_field({"date": " "}, "date", "w", "every price has a date")


@dataclass(frozen=True)
class Row:
    gpu: str
    aliases: tuple = ()


def test_find_gpu_row_through_compute_db_names_and_aliases():
    rows = (Row("H100"), Row("A100-80GB", ("A100",)), Row("MyCard"))
    assert find_gpu_row(rows, "h100-sxm").gpu == "H100"        # compute_db alias of H100
    assert find_gpu_row(rows, "A100-SXM4-80GB").gpu == "A100-80GB"
    assert find_gpu_row(rows, "mycard").gpu == "MyCard"         # a GPU compute_db does not know
    assert find_gpu_row(rows, "B200") is None
    assert "H100" in gpu_names("H100-SXM") and gpu_names("nonesuch") == ["nonesuch"]
