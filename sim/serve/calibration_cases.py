"""The public serving calibration cases of reference/calibration.md as clustersim inputs.

Case 1: Llama-2-7B on one A100 80GB (LMDeploy TurboMind, fp16), closed loop of 64 clients with 128
prompt + 128 output tokens per request. Case 2: Yi-34B, TP 2 on two A100-80GB PCIe joined by an NVLink
bridge (Sarathi-Serve research engine, fp16), decode-only iterations at ~1,020 tokens of context.
Used by tests/serve/test_serve_calibration*.py and the tables of docs/serve.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.serve.batch_time import HostOverhead, ServingTimer, make_timer
from sim.serve.plan import ServingPlan
from workload_gen.model import ModelSpec

# reference/calibration.md, serving cases. Hardware as topologies: one A100 80GB (SXM) alone; two
# A100-80GB-PCIe joined by an NVLink bridge, modelled as a 2-port switch node (SimAI files route
# intra-server GPU traffic through NVSwitch nodes; each GPU's link is the bridge's 300 GB/s per
# direction, so no bandwidth is added).
# Host: case 1's engine (LMDeploy TurboMind) is C++: launch gaps only; case 2's (Sarathi-Serve, a vLLM
# fork, no CUDA graphs) is eager PyTorch: HostOverhead.eager() (no per-iteration CPU figure is public).
CALIBRATION_CASES = {
    1: dict(model="llama2-7b", gpu="A100-80GB", gpus=1, host="launch_gap_only",
            plan=dict(tp=1, weight_dtype="fp16", scheduler="vllm")),
    2: dict(model="yi-34b", gpu="A100-80GB-PCIe", gpus=2, host="eager",
            plan=dict(tp=2, weight_dtype="fp16", scheduler="sarathi")),
}


@dataclass(frozen=True)
class CalibrationSetup:
    model: ModelSpec
    plan: ServingPlan
    topology: object
    gpu: str
    timer: ServingTimer


def calibration_setup(case: int, db=None, network: str = "analytical", host: HostOverhead | None = None,
                      **plan_fields) -> CalibrationSetup:
    """Model, plan, topology and timer of serving calibration case 1 (Llama-2-7B, 1 x A100 80GB, fp16)
    or 2 (Yi-34B, TP 2 on 2 x A100-80GB-PCIe with an NVLink bridge, fp16). `plan_fields` override
    ServingPlan fields (e.g. scheduler, max_batch_size); host: None = the case's engine (above)."""
    from dataclasses import replace as _replace

    from sim.errors import SimError
    from sim.inputs import make_topology
    from workload_gen.zoo import get_model

    if case not in CALIBRATION_CASES:
        raise SimError(f"calibration case {case!r}: known cases are {', '.join(map(str, CALIBRATION_CASES))}")
    c = CALIBRATION_CASES[case]
    n = c["gpus"]
    topology = make_topology(f"non-rail:gpus={n},gpus_per_server={n},network=false", gpu_type=c["gpu"])
    plan = _replace(ServingPlan(**c["plan"]), **plan_fields)
    model = get_model(c["model"])
    if host is None:
        host = getattr(HostOverhead, c["host"])()
    timer = make_timer(model, plan, topology, c["gpu"], db=db, network=network, host=host)
    return CalibrationSetup(model, plan, topology, c["gpu"], timer)
