"""Command-line flags of the time/cost/energy-to-train estimate (sim.train_cost), apart from the
estimate itself: registering them and checking whether any was given imports no cost, energy or
goodput model (a plain `clustersim run` needs none of them)."""

from __future__ import annotations


def add_training_arguments(p) -> None:
    """Flags of the time/cost/energy-to-train estimate (`clustersim run`, `compare`, `sweep`)."""
    g = p.add_argument_group("time, cost and energy to train (any of these adds the estimate)")
    g.add_argument("--cost-energy", action="store_const", const=True, default=None,
                   help="add cost, energy and goodput with the shipped tables (any flag below does too)")
    g.add_argument("--train-tokens", help="token budget, e.g. 2e12 or 15T: iterations, days, $ and MWh to train")
    g.add_argument("--mtbf-file", help="failure and checkpoint model YAML (default: sim/data/failures.yaml)")
    g.add_argument("--power-file", help="power table YAML (default: sim/data/power.yaml)")
    g.add_argument("--price-file", help="$/GPU-hour table YAML (default: sim/data/gpu_prices.yaml)")
    g.add_argument("--checkpoint-interval", type=float, metavar="S",
                   help="seconds of work between checkpoints (default: Daly's optimum)")
    g.add_argument("--checkpoint-bytes", type=float, metavar="B",
                   help="checkpoint size in bytes (default: parameters x bytes_per_param of the MTBF file)")


TRAIN_FLAGS = ("cost_energy", "train_tokens", "mtbf_file", "power_file", "price_file", "checkpoint_interval",
               "checkpoint_bytes")


def training_wanted(args) -> bool:
    """Whether any flag of add_training_arguments was given (the estimate is then made)."""
    return any(getattr(args, k, None) is not None for k in TRAIN_FLAGS)
