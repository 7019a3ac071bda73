"""`clustersim workload` end to end (in-process through sim.cli.main)."""

from __future__ import annotations

import pytest

from sim.cli import main


def test_summary_and_outputs(tmp_path, capsys):
    out, simai, aicb = tmp_path / "w.json", tmp_path / "w.txt", tmp_path / "w.csv"
    rc = main(["workload", "gpt-1.7b", "--world-size", "16", "--tp", "2", "--pp", "2", "--sp", "--gbs", "32",
               "--out", str(out), "--simai", str(simai), "--aicb-csv", str(aicb)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "parameters: total 1.6" in text and "FLOPs per iteration" in text and "tp " in text
    assert out.exists() and simai.exists() and aicb.exists()
    assert simai.read_text().split("\n", 1)[0].split()[:3] == ["HYBRID_TRANSFORMER_FWD_IN_BCKWD",
                                                               "model_parallel_NPU_group:", "2"]


def test_aicb_flags_and_user_tp_honoured(tmp_path, capsys):
    rc = main(["workload", "-m", "405", "--world_size", "1024", "--tensor_model_parallel_size", "4",
               "--pipeline_model_parallel", "8", "--frame", "Megatron", "--global_batch", "256", "--micro_batch", "1",
               "--seq_length", "4096", "--swiglu", "--use_flash_attn", "--enable_sequence_parallel",
               "--simai-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert rc == 0 and "tp 4 x cp 1 x pp 8 x dp 32" in text
    files = list(tmp_path.glob("*.txt"))
    assert len(files) == 1 and "tp4" in files[0].name


@pytest.mark.parametrize("argv,msg", [
    (["workload", "gpt3-175b", "--world-size", "20", "--tp", "5"], "plan.tp"),
    (["workload", "nosuchmodel"], "unknown model"),
    (["workload", "-m", "99"], "-m: unknown AICB model size"),
    (["workload"], "model: give a zoo model name"),
    (["workload", "gpt-1.7b", "--num-layers", "0"], "--num-layers: must be positive"),
])
def test_bad_input_exits_2_with_one_line(argv, msg, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("clustersim: error:") and msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_deepspeed_zero3(capsys):
    rc = main(["workload", "gpt-1.7b", "--frame", "DeepSpeed", "--stage", "3", "--world-size", "8", "--gbs", "16"])
    assert rc == 0 and "zero 3" in capsys.readouterr().out


def test_plan_file_without_seq_length_uses_the_models(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("world_size: 16\ntp: 8\npp: 2\nsequence_parallel: true\nglobal_batch_size: 16\n")
    # llama2-7b trains at 4096 tokens; ParallelPlan's own default (2048) must not override it
    assert main(["workload", "llama2-7b", "--plan-file", str(plan)]) == 0
    assert ", seq 4096," in capsys.readouterr().out
    assert main(["workload", "llama2-7b", "--plan-file", str(plan), "--seq", "1024"]) == 0
    assert ", seq 1024," in capsys.readouterr().out
    plan.write_text("world_size: 16\ntp: 8\npp: 2\nsequence_parallel: true\nglobal_batch_size: 16\n"
                    "seq_length: 2048\n")
    assert main(["workload", "llama2-7b", "--plan-file", str(plan)]) == 0
    assert ", seq 2048," in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--out", "--ops-csv", "--simai", "--aicb-csv"])
def test_output_path_that_is_a_directory_or_has_no_folder_exits_2(tmp_path, capsys, flag):
    # regression: `--out .` / `--ops-csv DIR` raised a traceback; missing folders named the temp file
    base = ["workload", "gpt-1.7b", "--world-size", "8", "--gbs", "16"]
    for path, want in ((str(tmp_path), "is a directory"), (str(tmp_path / "no" / "x.txt"), "does not exist")):
        rc = main(base + ["--out", str(tmp_path / "ok.json"), flag, path] if flag != "--out" else base + [flag, path])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith(f"clustersim: error: {flag}: {path}: ") and want in err
        assert err.count("\n") == 1 and ".tmp" not in err
    # checked before anything is written: no half set of outputs
    assert list(tmp_path.iterdir()) == []


def test_simai_dir_that_is_a_file_exits_2(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    rc = main(["workload", "gpt-1.7b", "--world-size", "8", "--gbs", "16", "--simai-dir", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "--simai-dir" in err and "not a directory" in err and err.count("\n") == 1


def _script(name, args, cwd):
    import shutil
    import subprocess
    from pathlib import Path
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    script = Path(__file__).resolve().parents[2] / "scripts" / name
    return subprocess.run(["bash", str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("tp_flag", [["--tp=2"], ["--tensor_model_parallel_size=2"],
                                     ["--tensor_model_parallel_size", "2"]])
def test_deepspeed_script_honours_tp_in_every_spelling(tmp_path, tp_flag):
    # regression: `--tp=2` / `--tensor_model_parallel_size=2` were overridden by the script's default --tp 1
    r = _script("deepspeed_workload.sh", ["gpt-1.7b", "--world_size", "8", "--global_batch", "16", *tp_flag,
                                          "--simai", str(tmp_path / "w.txt")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tp 2 x cp 1 x pp 1 x dp 4" in r.stdout


@pytest.mark.parametrize("name", ["deepspeed_workload.sh", "megatron_workload.sh"])
def test_scripts_reject_frame_without_value(tmp_path, name):
    r = _script(name, ["gpt-1.7b", "--frame"], tmp_path)
    assert r.returncode == 2 and "--frame: expected a value" in r.stderr and list(tmp_path.iterdir()) == []


def test_model_argument_may_be_a_file_like_measure(tmp_path, capsys):
    # `clustersim measure --model FILE` takes a file; `clustersim workload --model FILE` said "unknown model"
    f = tmp_path / "tiny.yaml"
    f.write_text("name: tiny\nnum_layers: 2\nhidden_size: 128\nnum_attention_heads: 4\nffn_hidden_size: 256\n"
                 "vocab_size: 1000\n")
    for argv in (["workload", str(f)], ["workload", "--model", str(f)]):
        assert main(argv + ["--world-size", "2", "--gbs", "2"]) == 0
        assert capsys.readouterr().out.startswith("model tiny: 2 layers, hidden 128")
    assert main(["workload", str(tmp_path / "missing.yaml")]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_simai_and_simai_dir_together_exit_2(tmp_path, capsys):
    # regression: --simai FILE was silently ignored when --simai-dir was also given
    rc = main(["workload", "gpt-1.7b", "--world-size", "8", "--gbs", "16", "--simai", str(tmp_path / "a.txt"),
               "--simai-dir", str(tmp_path / "d")])
    assert rc == 2 and "not both" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_aicb_dtype_spellings(capsys):
    # AICB users type torch names (--dtype bfloat16); these were rejected by argparse
    assert main(["workload", "gpt-1.7b", "--world-size", "8", "--gbs", "16", "--dtype", "bfloat16"]) == 0
    assert ", bf16," in capsys.readouterr().out
    assert main(["workload", "gpt-1.7b", "--world-size", "8", "--gbs", "16", "--dtype", "float16"]) == 0
    assert ", fp16," in capsys.readouterr().out


def test_deepspeed_script_keeps_the_plan_files_tp_and_zero_stage(tmp_path):
    # regression: the script appended `--tp 1`, overriding a --plan-file's tp; and a plan file without
    # zero_stage silently gave ZeRO-0 instead of the documented default ZeRO-1
    plan = tmp_path / "plan.yaml"
    plan.write_text("world_size: 8\ntp: 2\nglobal_batch_size: 16\n")
    r = _script("deepspeed_workload.sh", ["gpt-1.7b", "--plan-file", str(plan), "--simai", str(tmp_path / "w.txt")],
                tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tp 2 x cp 1 x pp 1 x dp 4" in r.stdout and ", zero 1" in r.stdout
    plan.write_text("world_size: 8\ntp: 2\nglobal_batch_size: 16\nzero_stage: 0\n")
    r = _script("deepspeed_workload.sh", ["gpt-1.7b", "--plan-file", str(plan), "--simai", str(tmp_path / "w.txt")],
                tmp_path)
    assert r.returncode == 0 and ", zero 0" in r.stdout
    r = _script("deepspeed_workload.sh", ["gpt-1.7b", "--world_size", "8", "--global_batch", "16",
                                          "--simai", str(tmp_path / "w.txt")], tmp_path)
    assert r.returncode == 0 and "tp 1 x cp 1 x pp 1 x dp 8" in r.stdout


@pytest.mark.parametrize("argv,head", [
    # AICB passes every dimension explicitly: a multi-head model stays multi-head when its heads change
    (["-m", "7", "--num_attention_heads", "16"], "heads 16/16, ffn 10880"),
    (["-m", "7", "--num_attention_heads", "64"], "heads 64/64, ffn 10880"),
    # a SwiGLU FFN that follows Megatron's default rule int(4h*2/3/64)*64 follows a new hidden size
    (["-m", "7", "--hidden_size", "5120", "--num_attention_heads", "40"], "hidden 5120, heads 40/40, ffn 13632"),
    (["-m", "405", "--hidden_size", "8192", "--num_attention_heads", "64"], "heads 64/64, ffn 53248"),
    (["gpt3-175b", "--hidden_size", "4096", "--num_attention_heads", "32"], "heads 32/32, ffn 16384"),
    (["llama3-8b", "--num_attention_heads", "64"], "heads 64/8, ffn 14336"),   # GQA keeps its KV heads
])
def test_dimension_overrides_follow_megatron_defaults(argv, head, capsys):
    assert main(["workload", *argv, "--world-size", "8", "--gbs", "8"]) == 0
    assert head in capsys.readouterr().out.splitlines()[0]
