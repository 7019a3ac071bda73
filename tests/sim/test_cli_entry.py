"""The `clustersim` entry point: --version, no prefix matching, one-line errors naming the closest flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.cli import main


def test_version_prints_the_installed_distribution_version(capsys):
    from importlib.metadata import version
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"clustersim {version('clustersim')}"


def test_version_does_not_import_the_simulator():
    code = ("import sys; from sim.cli import main; main(['--version']); "
            "print(sorted(m for m in ('numpy', 'pandas', 'sim.simulation', 'netsim') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_long_flag_prefixes_are_not_accepted(capsys):
    # --net would silently mean --network if argparse abbreviations were on
    with pytest.raises(SystemExit) as exc:
        main(["run", "--net", "analytical"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unrecognized arguments: --net analytical" in err


def test_a_misspelt_flag_names_the_closest_real_one(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--netwrok", "flow"])
    assert "unrecognized arguments: --netwrok flow; did you mean --network?" in capsys.readouterr().err


def test_unknown_flag_of_a_nested_command_is_matched_against_that_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--qsp", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("clustersim serve: error: unrecognized arguments: --qsp 3; did you mean --qps?")


def test_unknown_flag_without_a_close_match_names_no_flag(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--zzzzzzzz"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "unrecognized arguments: --zzzzzzzz" in err


def test_compatibility_notes_print_as_one_warning_line(tmp_path, capsys):
    import json
    model = tmp_path / "m.json"
    model.write_text(json.dumps({"model_type": "dense", "head_num": 8, "kv_head_num": 8, "layer_num": 2,
                                 "hidden_size": 1024, "intermediate_size": 2816, "vocab_size": 32000}))
    strategy = tmp_path / "s.json"
    strategy.write_text(json.dumps({"seq_len": 1024, "micro_batch_size": 1, "micro_batch_num": 2, "world_size": 2,
                                    "tp_size": 2, "pp_size": 1, "recompute_granularity": "full_block"}))
    assert main(["run", "-m", str(model), "--plan-file", str(strategy), "-n", "analytical", "-o", "-"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"clustersim: warning: {strategy}: key 'recompute_granularity': 'full_block' is inert without "
                      "\"enable_recompute\": true (SimuMax's rule); running without recompute")


@pytest.mark.parametrize("word", ["-nv", "-g_type", "-nope"])
def test_a_single_dash_word_is_not_a_short_flag_with_a_glued_value(word, capsys):
    # SimAI's -nv 360 must not run as `--network v`; -g_type as `-g _type`
    with pytest.raises(SystemExit) as exc:
        main(["run", word, "360"])
    assert exc.value.code == 2
    assert f"unrecognized arguments: {word} 360" in capsys.readouterr().err


def test_a_short_flag_with_a_glued_number_still_parses():
    from sim.cli import build_parser
    args = build_parser().parse_args(["run", "-g16"])
    assert args.gpus == 16


def test_help_builds_every_command_without_heavy_imports():
    code = ("import sys; from sim.cli import build_parser; build_parser().format_help(); "
            "print(sorted(m for m in ('numpy', 'pandas', 'matplotlib', 'networkx', 'numba', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_command_modules_match_what_each_module_registers():
    """A command line naming a subcommand imports only COMMAND_MODULES[command]: that table must say
    exactly which module registers each command (a new command missing from it is still reachable: the
    whole parser is built for names not in the table)."""
    import argparse
    import importlib

    from sim.cli import ALL_CLI_MODULES, COMMAND_MODULES, build_parser
    registered = {}
    for name in ALL_CLI_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        registered.update({cmd: name for cmd in sub.choices})
    assert registered == COMMAND_MODULES
    for cmd, module in COMMAND_MODULES.items():
        sub = next(a for a in build_parser([cmd])._actions if isinstance(a, argparse._SubParsersAction))
        assert set(sub.choices) == {c for c, m in COMMAND_MODULES.items() if m == module}


def test_run_does_not_import_other_commands_code():
    code = ("import sys; from sim.cli import build_parser; build_parser(['run', '--help-not-parsed']); "
            "print(sorted(m for m in ('sim.serve.cli', 'sim.chakra', 'compute_db.cli', 'netsim.cli', "
            "'sim.analysis.cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
