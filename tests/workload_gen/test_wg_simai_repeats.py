"""The bulk layer parse converts each distinct layer line once and shares its values among repeats; each line
keeps its own line number, and the result equals the line-by-line parse (issue 16)."""

from __future__ import annotations

from workload_gen.simai_workload import _parse_body, _parse_body_bulk, _read_lines


def test_repeated_layer_lines_keep_their_line_numbers(tmp_path):
    rows = ["a\t-1\t10\tALLREDUCE\t64\t7\tNONE\t0\t5\tALLGATHER\t16\t100",
            "b\t-1\t20\tNONE\t0\t7\tNONE\t0\t5\tNONE\t0\t100"]
    body_rows = [rows[i % 2] for i in range(7)] + [rows[0]]          # a b a b a b a a
    path = tmp_path / "w.txt"
    head = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 pp: 1 ga: 1 all_gpus: 4"
    path.write_text("\n".join([head, str(len(body_rows)), ""] + body_rows[:3] + ["  "] + body_rows[3:]) + "\n")
    _h, lines, trailer, covered = _read_lines(str(path))
    # blank lines are skipped but counted: the body starts on line 4, line 7 is blank
    assert [ln.lineno for ln in lines] == [4, 5, 6, 8, 9, 10, 11, 12]
    assert [ln.name for ln in lines] == ["a", "b", "a", "b", "a", "b", "a", "a"]
    assert lines[0].ns == (10, 7, 5) and lines[1].ns == (20, 7, 5)
    assert lines[0].comm == (("all_reduce", "tp"), None, ("all_gather", "dp")) and lines[0].size == (64, 0, 16)
    assert lines[1].comm == (None, None, None) and lines[1].size == (0, 0, 0)
    assert (trailer, covered) == ([], "")
    body = [(ln.lineno, r.split()) for ln, r in zip(lines, body_rows)]
    slow = _parse_body(str(path), body)
    assert [tuple(x) for x in _parse_body_bulk(body)] == [(s.name, s.ns, s.comm, s.size, s.lineno) for s in slow]
