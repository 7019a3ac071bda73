"""AICB users' command lines through scripts/ (megatron_gpt.sh, megatron_workload_with_aiob.sh,
deepspeed_llama.sh) under sh and bash; every AICB flag honoured or answered with one line; AIOB timing
(--aiob_enable with compute_db, --comp_filepath files); the AICB CSV read back; round trips."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sim.cli import main
from workload_gen.errors import ConfigFileError

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]

AIOB_EXAMPLE = """train_iter:10
Emb:
    time_gpu_max: 857
    time_gpu_min: 782
    time_gpu_avg: 799
layernorm:
    time_gpu_max: 60
    time_gpu_min: 50
    time_gpu_avg: 55
atten_qkv:
    time_gpu_max: 1255
    time_gpu_min: 862
    time_gpu_avg: 889
atten_flash:
    time_gpu_max: 700
    time_gpu_min: 600
    time_gpu_avg: 650
atten_linear:
    time_gpu_max: 400
    time_gpu_min: 300
    time_gpu_avg: 310
mlp_linear_1:
    time_gpu_max: 2000
    time_gpu_min: 1700
    time_gpu_avg: 1750
param_time:
    time_gpu_max: 10
    time_gpu_min: 9
    time_gpu_avg: 9
"""


def _sh(shell: str, line: str, cwd: Path):
    if shutil.which("clustersim") is None:
        pytest.fail("the clustersim console script is not installed (pip install -e .)")
    return subprocess.run([shell, "-c", line], cwd=cwd, capture_output=True, text=True, timeout=300)


def _header(path: Path) -> dict:
    toks = path.read_text().splitlines()[0].split()
    return {toks[i]: toks[i + 1] for i in range(1, len(toks) - 1) if toks[i].endswith(":")}


# AICB's README command lines (AICB v1.x), verbatim apart from the script folder
README_LINES = [
    ("sh ./scripts/megatron_gpt.sh -m 13 --world_size 8 --tensor_model_parallel_size 8 --pipeline_model_parallel 1 "
     "--frame Megatron --global_batch 2 --micro_batch 1 --seq_length 4096 --swiglu --use_flash_attn --aiob_enable",
     "aicb-13-world_size8-tp8-pp1-ep1-gbs2-mbs1-seq4096.txt", {"model_parallel_NPU_group:": "8", "ga:": "2",
                                                               "all_gpus:": "8"}),
    ("sh scripts/megatron_gpt.sh -m moe --world_size 8 --tensor_model_parallel_size 4 --pipeline_model_parallel 1 "
     "--moe_enable --expert_model_parallel_size 1 --frame Megatron --global_batch 16 --num_experts 4 "
     "--moe_router_topk 2 --micro_batch 1 --sp --grouped_gemm --aiob_enable --swiglu --use_flash_attn",
     "aicb-moe-world_size8-tp4-pp1-ep1-gbs16-mbs1-seq4096.txt", {"model_parallel_NPU_group:": "4", "ep:": "1",
                                                                 "ga:": "8", "all_gpus:": "8"}),
    ("sh ./scripts/megatron_workload_with_aiob.sh -m 7 --world_size 4096 --tensor_model_parallel_size 2 "
     "--pipeline_model_parallel 1 --frame Megatron --global_batch 8192 --micro_batch 1 --seq_length 4096 "
     "--swiglu --use_flash_attn --aiob_enable --comp_filepath workload/aiob_inputs/Example.txt",
     "aicb-7-world_size4096-tp2-pp1-ep1-gbs8192-mbs1-seq4096.txt", {"model_parallel_NPU_group:": "2", "ga:": "4",
                                                                    "all_gpus:": "4096"}),
    ("sh scripts/megatron_workload_with_aiob.sh -m moe --world_size 512 --tensor_model_parallel_size 2 "
     "--pipeline_model_parallel 1 --sp --ep 16 --num_experts 64 --moe_router_topk 2 --moe_grouped_gemm --moe_enable "
     "--frame Megatron --global_batch 1024 --micro_batch 1 --seq_length 4096 --swiglu --use_flash_attn --aiob_enable",
     "aicb-moe-world_size512-tp2-pp1-ep16-gbs1024-mbs1-seq4096.txt", {"model_parallel_NPU_group:": "2", "ep:": "16",
                                                                      "ga:": "4", "all_gpus:": "512"}),
    ("sh scripts/deepspeed_llama.sh --zero_stage 3 -m 65 --epoch_num 100 --reduce_bucket_size=1000000000 "
     "--allgather_bucket_size=500000000 --param_persistence_threshold=1000000",
     "aicb-llama-65b-world_size32-tp1-pp1-ep1-gbs1024-mbs1-seq4096.txt", {"model_parallel_NPU_group:": "1",
                                                                          "ga:": "32", "all_gpus:": "32"}),
]


def _aicb_tree(tmp_path: Path) -> Path:
    """An AICB checkout's layout: scripts/ (ours) and the AIOB example file its README names."""
    shutil.copytree(SCRIPTS, tmp_path / "scripts")
    aiob = tmp_path / "workload" / "aiob_inputs" / "Example.txt"
    aiob.parent.mkdir(parents=True)
    aiob.write_text(AIOB_EXAMPLE)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS)
def test_aicb_readme_lines_run_unchanged(shell, tmp_path):
    root = _aicb_tree(tmp_path)
    for line, name, header in README_LINES:
        line = line if shell == "sh" else "bash" + line[2:]      # `sh ./scripts/x.sh` -> `bash ./scripts/x.sh`
        r = _sh(shell, line, root)
        assert r.returncode == 0, (line, r.stderr)
        assert "Traceback" not in r.stderr and "pipefail" not in r.stderr
        f = root / "results" / "workload" / name
        assert f.is_file(), (line, r.stdout)
        got = _header(f)
        assert {k: got[k] for k in header} == header, line
        if "--aiob_enable" in line:
            assert "compute times in the SimAI file: " in r.stdout and "PLACEHOLDER" not in r.stdout.split(
                "compute times in the SimAI file: ")[1].splitlines()[0]
    assert "--epoch_num 100: ignored:" in r.stderr and "--param_persistence_threshold 1000000: ignored:" in r.stderr


def test_scripts_are_posix_sh():
    """No bash-only constructs in the wrappers AICB / SimAI users run with `sh`."""
    for p in sorted(SCRIPTS.iterdir()):
        text = p.read_text()
        assert text.startswith("#!/bin/sh\n") or p.name == "serve.sh", p.name   # serve.sh: the serving wrapper
        for bashism in ("pipefail", "[[", "+=(", "${!", "=~", "declare ", "local -a", "<<<", "function "):
            assert bashism not in text, (p.name, bashism)
        if shutil.which("dash"):
            r = subprocess.run(["dash", "-n", str(p)], capture_output=True, text=True)
            assert r.returncode == 0, (p.name, r.stderr)


def _aicb(argv, capsys, tmp_path):
    rc = main(["aicb", *argv, "--simai", str(tmp_path / "w.txt")])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_issue_flags_are_honoured(tmp_path, capsys):
    rc, out, err = _aicb(["-m", "moe", "--nnodes", "2", "--nproc_per_node", "8", "--tensor_model_parallel_size", "2",
                          "--pipeline_model_parallel_size", "2", "--moe_enabled", "--num_moe_experts", "16",
                          "--expert_parallel_size", "4", "--topk", "4", "--grouped_gemm", "--sp",
                          "--model_name", "my_moe", "--workload_only", "--global_batch", "64"], capsys, tmp_path)
    assert rc == 0, err
    assert out.startswith("model my_moe: 32 layers")
    assert "world 16 = tp 2 x cp 1 x pp 2 x dp 4, ep 4" in out
    assert err == ""                                     # all honoured: no notes
    w = json.loads(json.dumps(_header(tmp_path / "w.txt")))
    assert w["ep:"] == "4" and w["pp:"] == "2" and w["all_gpus:"] == "16"
    from workload_gen.simai_workload import read_simai_workload
    back = read_simai_workload(tmp_path / "w.txt")
    assert (back.model.num_experts, back.model.moe_top_k, back.plan.moe_grouped_gemm) == (16, 4, True)


def test_every_aicb_parser_flag_is_known(tmp_path, capsys):
    """AICB utils.py's flags (simai_formats.md §7) are all accepted by `clustersim aicb`: none is
    'unrecognized' (each is honoured or answered with one line)."""
    from sim.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices["aicb"]
    known = {f for a in sub._actions for f in a.option_strings}
    flags = ("--add_bias_linear --aiob_enable --allgather_bucket_size --amp_enabled --begin_size --bias_gelu_fusion "
             "--comp_filepath --computation_enable --contiguous_gradients --dtype --enable_sequence_parallel "
             "--enable_visual --end_size --epoch_num --ffn_hidden_size --frame --gated_linear_unit --global_batch "
             "--gpu_type --hidden_size --iter_num --kv_lora_rank --make_vocab_size_divisible_by "
             "--max_live_parameters --max_position_embeddings --micro_batch --model_name "
             "--model_persistence_threshold --multi_all_reduce_enable --n_dense_layers --n_shared_expert "
             "--num_attention_heads --num_layers --onnx_safe --openai_gelu --overlap_grad_reduce --overlap_version "
             "--param_persistence_threshold --pipeline_model_parallel --pp_rank --prefetch_bucket_size "
             "--q_lora_rank --qk_nope_dim --qk_rope_dim --reduce_bucket_size --seq_length --squared_relu --stage "
             "--swiglu --tensor_model_parallel_size --test_comm --use-distributed-optimizer --use_flash_attn "
             "--v_head_dim --vocab_size --workload_only --world_size "
             # MoE / context parallel (utils.py) and the scripts' case labels
             "--context-parallel-size --sp --expert_model_parallel_size --ep --num_experts --moe_router_topk "
             "--moe_grouped_gemm --moe_enable --recompute_activations -m --model_size -l --topk --experts "
             "--nnodes --node_rank --nproc_per_node --master_addr --master_port").split()
    assert [f for f in flags if f not in known] == []


@pytest.mark.parametrize("flag,value", [
    ("--epoch_num", "3"), ("--iter_num", "10"), ("--node_rank", "0"), ("--master_addr", "10.0.0.1"),
    ("--master_port", "29500"), ("--enable_visual", None), ("--openai_gelu", None), ("--onnx_safe", None),
    ("--bias_gelu_fusion", None), ("--squared_relu", None), ("--max_position_embeddings", "4096"),
    ("--amp_enabled", None), ("--contiguous_gradients", None), ("--max_live_parameters", "1000"),
    ("--model_persistence_threshold", "10"), ("--param_persistence_threshold", "10"),
    ("--prefetch_bucket_size", "10"), ("--overlap_version", "1"), ("--computation_enable", None),
])
def test_noop_flags_print_one_line(flag, value, tmp_path, capsys):
    argv = ["-m", "7", "--world_size", "8", "--global_batch", "8", flag] + ([value] if value else [])
    rc, out, err = _aicb(argv, capsys, tmp_path)
    lines = err.strip().splitlines()
    assert rc == 0 and len(lines) == 1 and lines[0].startswith(f"note: {flag}") and ": ignored: " in lines[0]


@pytest.mark.parametrize("argv,msg", [
    (["--test_comm", "all_reduce"], "--test_comm: not supported: AICB's collective test: use `clustersim collective`"),
    (["--begin_size", "1024"], "--begin_size: not supported"),
    (["--frame", "collective_test"], "--frame collective_test: AICB's collective test"),
    (["--pp_rank", "1"], "--pp_rank 1: not supported"),
    (["--nnodes", "2", "--nproc_per_node", "8", "--world_size", "8"], "--world_size 8 contradicts --nnodes 2"),
    (["-m", "13", "--moe_enable"], "--moe_enable: model aicb-13 is dense"),
    (["--comp_filepath", "nope.txt"], "nope.txt: AIOB compute file not found"),
    (["--aiob_enable", "--gpu_type", "Z900"], "Z900"),
    (["--model_name", "gpt_13B_custom"], "--model_name 'gpt_13B_custom': not a zoo model"),
])
def test_refused_flags_are_one_line(argv, msg, tmp_path, capsys):
    rc, out, err = _aicb(argv, capsys, tmp_path)
    assert rc == 2 and err.startswith("clustersim: error:") and msg in err and err.count("\n") == 1
    assert not (tmp_path / "w.txt").exists()


def test_workload_command_refuses_aiob_without_compute_db(capsys):
    assert main(["workload", "-m", "7", "--aiob_enable"]) == 2
    err = capsys.readouterr().err
    assert "--aiob_enable: kernel timing needs compute_db: use `clustersim aicb`" in err and err.count("\n") == 1


def test_aicb_defaults(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["aicb"]) == 0
    out = capsys.readouterr().out
    # AICB's defaults: -m 13, world 32, TP 8, global batch 1024, micro-batch 1, sequence 4096
    assert out.startswith("model aicb-13: 40 layers, hidden 5120")
    assert "world 32 = tp 8 x cp 1 x pp 1 x dp 4" in out and "mbs 1, gbs 1024, seq 4096" in out
    assert (tmp_path / "results" / "workload" / "aicb-13-world_size32-tp8-pp1-ep1-gbs1024-mbs1-seq4096.txt").is_file()


def _section_ops(path):
    from workload_gen.simai_workload import read_simai_workload
    w = read_simai_workload(path)
    return w, [op for ch in w.stages[0].chunks for op in ch.forward + ch.backward if not op.is_comm]


def test_aiob_enable_and_comp_filepath_times(tmp_path, capsys):
    from compute_db import open_db
    aiob = tmp_path / "Example.txt"
    aiob.write_text(AIOB_EXAMPLE)
    base = ["-m", "7", "--world_size", "8", "--tensor_model_parallel_size", "2", "--global_batch", "8"]
    assert main(["aicb", *base, "--aiob_enable", "--gpu_type", "A100", "--simai", str(tmp_path / "db.txt")]) == 0
    assert main(["aicb", *base, "--comp_filepath", str(aiob), "--simai", str(tmp_path / "aiob.txt")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"Example.txt:\d+: AIOB key 'param_time' has no clustersim kernel", err)
    db = open_db()
    w, ops = _section_ops(tmp_path / "db.txt")
    assert all(op.time_s == pytest.approx(db.lookup(op, "A100").time_s, rel=1e-12) for op in ops)
    w, ops = _section_ops(tmp_path / "aiob.txt")
    by = {}
    for op in ops:
        by.setdefault(op.name, op)
    measured = {"embedding": 799e-6, "input_norm": 55e-6, "attn_qkv": 889e-6, "attn_core": 650e-6,
                "attn_proj": 310e-6, "mlp_fc1": 1750e-6}
    for name, t in measured.items():
        assert by[name].time_s == pytest.approx(t)
    for name in ("attn_qkv", "mlp_fc1"):       # backward: compute_db x the measured / compute_db forward ratio
        ratio = measured[name] / db.lookup(by[name], "H100").time_s
        for suffix in ("_dgrad", "_wgrad"):
            assert by[name + suffix].time_s == pytest.approx(db.lookup(by[name + suffix], "H100").time_s * ratio)
    assert by["mlp_fc2"].time_s == pytest.approx(db.lookup(by["mlp_fc2"], "H100").time_s)   # no AIOB key


@pytest.mark.parametrize("text,msg", [
    ("train_iter:x\n", ":1: train_iter must be a whole number"),
    ("Emb:\n    time_gpu_avg: fast\n", ":2: time_gpu_avg must be a time in us"),
    ("Emb:\n    time_gpu_max: 3\n", ":1: kernel 'Emb' has no time_gpu_avg"),
    ("    time_gpu_avg: 3\n", ":1: time_gpu_avg before any kernel key"),
    ("Emb:\n    time_gpu_avg: 3\nEmb:\n    time_gpu_avg: 3\n", ":3: kernel 'Emb' appears twice"),
    ("hello world\n", ":1: expected 'train_iter:N'"),
    ("train_iter:3\n", ":1: no kernel times"),
])
def test_bad_aiob_files_name_file_and_line(tmp_path, text, msg):
    from workload_gen.aiob import read_aiob_file
    p = tmp_path / "a.txt"
    p.write_text(text)
    with pytest.raises(ConfigFileError) as e:
        read_aiob_file(p)
    assert msg in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------ AICB CSV round trips
def _iteration_s(argv, capsys) -> float:
    assert main(argv + ["-o", "-", "--json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)["iteration_time_s"]


@pytest.mark.parametrize("aicb_args,run_args", [
    (["-m", "7", "--world_size", "16", "--tensor_model_parallel_size", "4", "--global_batch", "32", "--sp",
      "--use-distributed-optimizer"],
     ["-m", "aicb-7", "--tp", "4", "--world-size", "16", "--global-batch", "32", "--micro-batch", "1",
      "--seq-length", "4096", "--sp", "--use-distributed-optimizer"]),
    (["-m", "moe", "--world_size", "16", "--tensor_model_parallel_size", "2", "--ep", "4", "--sp",
      "--global_batch", "16", "--num_layers", "4"],
     None),
    (["--frame", "DeepSpeed", "-m", "7", "--stage", "3", "--world_size", "8", "--global_batch", "8",
      "--seq_length", "2048"], None),
])
def test_round_trip_model_aicb_csv_run_within_1_percent(aicb_args, run_args, tmp_path, capsys):
    csv_path, out = tmp_path / "w.csv", tmp_path / "w.json"
    assert main(["aicb", *aicb_args, "--aiob_enable", "--aicb-csv", str(csv_path), "--out", str(out)]) == 0
    capsys.readouterr()
    direct = _iteration_s(["run", *(run_args or ["-w", str(out)])], capsys)
    via_csv = _iteration_s(["run", "-w", str(csv_path)], capsys)
    assert via_csv == pytest.approx(direct, rel=0.01)


def test_aicb_csv_keeps_aicb_columns_and_refuses_what_it_cannot_rebuild(tmp_path, capsys):
    import csv
    p = tmp_path / "w.csv"
    assert main(["workload", "gpt-1.7b", "--world-size", "8", "--tp", "2", "--gbs", "8", "--aicb-csv", str(p)]) == 0
    rows = list(csv.reader(p.open()))
    from workload_gen.aicb_csv import COLUMNS
    assert tuple(rows[0]) == COLUMNS and rows[-1][0] == "CommType.epoch_end"
    comp = [r for r in rows[1:-1] if r[0] == "CommType.computation"]
    assert comp and all(r[1] == "None" and r[3] == "0" and r[7] for r in comp)
    overlap = [r for r in rows[1:-1] if r[7].startswith("overlap")]
    assert overlap and all(r[7] == "overlap" for r in overlap)          # AICB's token, unchanged
    assert all(r[4].split(" ", 1)[0].split(".", 1)[0] in ("forward", "backward", "recompute", "iteration_start",
                                                         "iteration_end") for r in rows[1:-1])
    # pipeline parallel: stage 0 only in an AICB log, refused when read back
    q = tmp_path / "pp.csv"
    assert main(["workload", "gpt-1.7b", "--world-size", "8", "--pp", "2", "--gbs", "8", "--aicb-csv", str(q)]) == 0
    capsys.readouterr()
    assert main(["run", "-w", str(q), "-o", "-"]) == 2
    assert "an AICB log holds stage 0 only" in capsys.readouterr().err
    # an AICB log written by AICB (no clustersim details) is refused with the reason
    r = tmp_path / "aicb.csv"
    r.write_text(",".join(COLUMNS) + "\nCommType.all_reduce,CommGroup.dp_group,16,8,init.model_setup,None,None,,"
                 "None,None,None,1\nCommType.epoch_end,None,None,0,,None,None,,None,None,None,1\n")
    assert main(["run", "-w", str(r), "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "carries no clustersim model/plan" in err and err.count("\n") == 1
    # an edited msg_size is read (the columns win over the details)
    rows = list(csv.reader(p.open()))
    k = next(i for i, r in enumerate(rows) if r[0] == "CommType.all_reduce" and r[1] == "CommGroup.tp_group")
    rows[k][3] = str(int(rows[k][3]) * 2)
    with open(p, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    from workload_gen.aicb_csv import read_aicb_csv
    w = read_aicb_csv(p)
    sizes = [op.size_bytes for ch in w.stages[0].chunks for op in ch.forward + ch.backward if op.is_comm]
    assert int(rows[k][3]) in sizes


def test_megatron_gpt_without_workload_only_says_so(tmp_path):
    r = _sh("sh", f"{SCRIPTS / 'megatron_gpt.sh'} -m 7 --world_size 8 --global_batch 8 --simai w.txt", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ("megatron_gpt.sh: note: no --workload_only: AICB would train on GPUs; clustersim "
                                "writes the workload")
    assert os.path.isfile(tmp_path / "w.txt")


@pytest.mark.parametrize("field,value,said", [
    ("pp_send_bytes", "x", "pp_send_bytes: must be an integer >= 0"),
    ("schedule", "zigzag", "schedule: must be one of"),
    ("num_microbatches", 1 << 20, "num_microbatches: must be an integer in 1..16384"),
])
def test_edited_epoch_end_row_is_one_line_naming_the_field(tmp_path, capsys, field, value, said):
    import csv
    p = tmp_path / "w.csv"
    assert main(["workload", "gpt-1.7b", "--world-size", "8", "--tp", "2", "--gbs", "8", "--aicb-csv", str(p)]) == 0
    rows = list(csv.reader(p.open()))
    doc = json.loads(rows[-1][4])
    doc[field] = value
    rows[-1][4] = json.dumps(doc)
    with p.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    capsys.readouterr()
    out = tmp_path / "res"
    assert main(["run", "-w", str(p), "-n", "analytical", "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{p}:{len(rows)}: epoch_end stage: {said}" in err
    assert not out.exists()
