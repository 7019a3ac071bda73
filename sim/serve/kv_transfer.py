"""KV-cache transfer of a disaggregated deployment: which GPU sends which bytes to which, and when, as
flows on the fabric (netsim's flow engine, max-min sharing between all transfers in flight).

Which bytes (`rank_streams`): the KV cache of one layer and one token is made of units: the KV heads of
a GQA/MHA model (e.g. 2 x head_dim x KV bytes each), or the one MLA latent ((kv_lora_rank + rope dim) x KV
bytes). Rank i of a tp-way stage holds units [i n/tp, (i+1) n/tp) when n >= tp, else unit i n / tp (heads
replicated over tp / n ranks; the MLA latent is on every rank), as workload_gen.inference shards them.
Every decode rank receives each unit it holds, for each layer of its stage, from a prefill rank holding
that unit in the prefill stage holding that layer (several holders: the (decode rank mod holders)-th,
spreading replicated sources). One stream = (prefill rank, decode rank, contiguous run of layers of a
prefill stage); its bytes per prompt token = units x unit bytes x layers. The bytes moved per request are
therefore the decode replica's KV of the prompt: P x Σ over its ranks of (units x unit bytes x layers).

When (`KVTransfer`, mode):
- "whole": every stream of a request starts when its prefill ends (the first token), with all its
  bytes (P tokens).
- "layerwise": the KV of prefill chunk c on stage s, which runs [t0, t0 + d) over L layers, is produced
  layer by layer: layer k (k-th of the stage) at t0 + (k + 1) d / L. A stream carrying layers k0..k1 of
  the stage sends layer k1 as its own flow from t0 + (k1 + 1) d / L, and layers k0..k1-1 as one flow
  from t0 + (k0 + 1) d / L capped at the production rate (bytes of one layer per d / L): it never
  sends bytes before they exist (sent by t <= (x - k0 - 1) layers <= floor(x) - k0 produced, x =
  (t - t0) L / d), and it ends when discrete per-layer sends would: at the chunk's end plus one layer's
  transfer when the fabric keeps up, at the first layer plus all bytes / bandwidth when it does not.
  Only what cannot overlap the prefill is exposed.
Each flow is netsim's point-to-point send of its bytes (Planner: protocol choice by size, launch and
base latency, per-hop latency, wire efficiency, pipeline fill) placed on one FlowEngine shared by all
transfers: concurrent transfers crossing a link share it max-min. A request's KV has landed when its
last flow completes.

Ignored: contention between KV flows and the pools' own TP/PP collectives (those are timed per
iteration by sim.serve.batch_time, which does not see KV traffic); the prefill replica frees the
request's blocks at its first token although the transfer still reads them; the decode side stages
landed KV until admission (no back-pressure on the transfer from a full decode pool).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.errors import SimError
from sim.serve.plan import KV_MODES, ServingPlan


@dataclass(frozen=True)
class RankStream:
    """KV one prefill rank sends one decode rank per prompt token: `num_layers` layers starting at
    position `first_pos` of prefill stage `pstage` (which has `stage_layers` layers)."""
    pstage: int
    prank: int
    dstage: int
    drank: int
    first_pos: int
    num_layers: int
    stage_layers: int
    units: int
    bytes_per_token_layer: int        # units x unit bytes

    @property
    def bytes_per_token(self) -> int:
        return self.bytes_per_token_layer * self.num_layers


def kv_units(model, kv_dtype: str) -> tuple[int, int]:
    """(units per layer, bytes of one unit per token): KV heads for GQA/MHA, one latent for MLA."""
    from workload_gen import inference as inf
    one = inf.inference_spec(model, tp=1, pp=1, kv_dtype=kv_dtype).kv_bytes_per_token_layer()
    n = 1 if model.is_mla else int(model.kv_heads)
    return n, one // n


def rank_units(num_units: int, tp: int, rank: int) -> tuple[int, ...]:
    """KV units rank `rank` of a tp-way stage holds (module docstring)."""
    if num_units >= tp:
        return tuple(range(rank * num_units // tp, (rank + 1) * num_units // tp))
    return (rank * num_units // tp,)


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs (first, length) of sorted positions."""
    out: list[tuple[int, int]] = []
    for p in positions:
        if out and out[-1][0] + out[-1][1] == p:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def rank_streams(model, prefill: ServingPlan, decode: ServingPlan) -> list[RankStream]:
    """The streams of one request between a prefill and a decode replica (module docstring)."""
    from workload_gen import inference as inf
    if prefill.kv_cache_dtype != decode.kv_cache_dtype:
        raise SimError(f"KV cache dtype differs between the pools (prefill {prefill.kv_cache_dtype}, decode "
                       f"{decode.kv_cache_dtype}): the cache moves as it is, give both the same --kv-dtype")
    n, unit_bytes = kv_units(model, prefill.kv_cache_dtype)
    sp = inf.inference_spec(model, tp=prefill.tp, pp=prefill.pp, ep=prefill.ep,
                            weight_dtype=prefill.weight_dtype, kv_dtype=prefill.kv_cache_dtype)
    sd = inf.inference_spec(model, tp=decode.tp, pp=decode.pp, ep=decode.ep,
                            weight_dtype=decode.weight_dtype, kv_dtype=decode.kv_cache_dtype)
    holders = {u: [i for i in range(prefill.tp) if u in rank_units(n, prefill.tp, i)] for u in range(n)}
    pos = {}
    for s, ids in enumerate(sp.stage_layer_ids):
        for k, layer in enumerate(ids):
            pos[layer] = (s, k)
    acc: dict[tuple, int] = defaultdict(int)
    for ds, ids in enumerate(sd.stage_layer_ids):
        by_pstage: dict[int, list[int]] = defaultdict(list)
        for layer in ids:
            s, k = pos[layer]
            by_pstage[s].append(k)
        for ps, ks in sorted(by_pstage.items()):
            for first, length in _runs(sorted(ks)):
                for j in range(decode.tp):
                    for u in rank_units(n, decode.tp, j):
                        h = holders[u]
                        acc[(ps, h[j % len(h)], ds, j, first, length)] += 1
    L = [len(ids) for ids in sp.stage_layer_ids]
    return [RankStream(ps, i, ds, j, first, length, L[ps], units, units * unit_bytes)
            for (ps, i, ds, j, first, length), units in sorted(acc.items())]


class _Pending:
    __slots__ = ("request", "left")

    def __init__(self, request) -> None:
        self.request = request
        self.left = 0


class KVTransfer:
    """The KV hand-off of a decode pool (sim.serve.engine.KVHandoff) on one flow engine.

    streams: `rank_streams` of the two pools; prefill_placement / decode_placement: the pools'
    sim.serve.replica.ServingPlacement (topology GPUs of every rank); planner: a netsim Planner of the
    topology; prefill_replica[id]: the prefill replica of request id; chunks[id]: its prefill chunk stage
    runs [(stage, start_s, dur_s, tokens), ...] (layerwise mode only).
    Records one row per flow: request id, src GPU, dst GPU, KV bytes, start (when its bytes may start
    moving, before the send's latency), end.
    """

    def __init__(self, streams: list[RankStream], prefill_placement, decode_placement, planner, mode: str,
                 prefill_replica: dict[int, int], chunks: dict[int, list[tuple[int, float, float, int]]] | None = None):
        from netsim.engine import FlowEngine
        if mode not in KV_MODES:
            raise SimError(f"KV transfer mode '{mode}': expected one of {', '.join(KV_MODES)}")
        if mode == "layerwise" and chunks is None:
            raise SimError("layer-wise KV transfer needs the prefill chunk log (simulate(record_chunks=True))")
        self.streams = streams
        self.by_pstage: dict[int, list[RankStream]] = defaultdict(list)
        for st in streams:
            self.by_pstage[st.pstage].append(st)
        self.pp_place = prefill_placement
        self.dp_place = decode_placement
        self.planner = planner
        self.mode = mode
        self.prefill_replica = prefill_replica
        self.chunks = chunks
        self.engine = FlowEngine(planner.view.capacity_Bps)
        self._landed: list = []
        # one row per flow
        self.row_request: list[int] = []
        self.row_src: list[int] = []
        self.row_dst: list[int] = []
        self.row_bytes: list[int] = []
        self.row_start: list[float] = []
        self.row_end: list[float] = []

    # ---------------------------------------------------------------- KVHandoff
    def start(self, request, replica: int, now_s: float) -> None:
        eng = self.engine
        if now_s > eng.now_s:
            self.advance_engine(now_s)
        src_rep = self.pp_place.replicas[self.prefill_replica[request.id]]
        dst_rep = self.dp_place.replicas[replica]
        pend = _Pending(request)
        if self.mode == "whole":
            P = request.num_prefill
            for st in self.streams:
                self._send(pend, src_rep.stages[st.pstage][st.prank], dst_rep.stages[st.dstage][st.drank],
                           P * st.bytes_per_token, now_s, math.inf)
        else:
            for stage, t0, d, c in self.chunks[request.id]:
                for st in self.by_pstage.get(stage, ()):
                    src = src_rep.stages[st.pstage][st.prank]
                    dst = dst_rep.stages[st.dstage][st.drank]
                    layer_bytes = c * st.bytes_per_token_layer
                    step = d / st.stage_layers
                    if st.num_layers > 1:
                        cap = layer_bytes / step if step > 0 else math.inf
                        self._send(pend, src, dst, layer_bytes * (st.num_layers - 1),
                                   max(now_s, t0 + d * ((st.first_pos + 1) / st.stage_layers)), cap)
                    self._send(pend, src, dst, layer_bytes,
                               max(now_s, t0 + d * ((st.first_pos + st.num_layers) / st.stage_layers)), math.inf)
        if pend.left == 0:          # nothing to move (no streams): landed at once
            self._landed.append(request)

    def next_event_time(self) -> float:
        return self.engine.next_event_time()

    def advance(self, until_s: float) -> list:
        self.advance_engine(until_s)
        out, self._landed = self._landed, []
        return out

    def advance_engine(self, until_s: float) -> None:
        self.engine.advance(until_s)

    # ---------------------------------------------------------------- flows
    def _send(self, pend: _Pending, src: int, dst: int, kv_bytes: int, start_s: float, cap_kv_Bps: float) -> None:
        """One point-to-point send of `kv_bytes` from `start_s` (netsim's send model), its rate capped at
        `cap_kv_Bps` KV bytes/s (scaled to the flow's payload, which includes pipeline fill)."""
        from netsim.api import CollectiveRequest
        if kv_bytes <= 0:
            return
        planner = self.planner
        gpus, _shape, _facts, alg, proto = planner.choose(CollectiveRequest("send", (src, dst), int(kv_bytes)))
        plan = planner.plan("send", alg, proto, gpus)
        size = float(kv_bytes)
        delay, mult = plan.timing(size)
        eng = self.engine
        row = len(self.row_request)
        self.row_request.append(pend.request.id)
        self.row_src.append(src)
        self.row_dst.append(dst)
        self.row_bytes.append(int(kv_bytes))
        self.row_start.append(start_s)
        self.row_end.append(math.nan)
        for f in plan.flows:
            payload = f.payload_bytes(size)
            cap = f.cap_Bps
            if cap_kv_Bps < math.inf:
                cap = min(cap, cap_kv_Bps * payload / size)
            pend.left += 1
            eng.add_flow(f.channels, payload, weights=f.weights,
                         latency_s=(start_s - eng.now_s) + delay + f.latency_s * mult, cap_Bps=cap,
                         on_done=lambda _fid, t, pend=pend, row=row: self._done(pend, row, t))

    def _done(self, pend: _Pending, row: int, t: float) -> None:
        end = self.row_end[row]
        if not end >= t:               # NaN or earlier
            self.row_end[row] = t
        pend.left -= 1
        if pend.left == 0:
            self._landed.append(pend.request)

    # ---------------------------------------------------------------- reports
    def flows_frame(self) -> pd.DataFrame:
        """One row per send: request_id, src_gpu, dst_gpu, bytes (KV bytes), start_s, end_s."""
        return pd.DataFrame({"request_id": np.asarray(self.row_request, dtype=np.int64),
                             "src_gpu": np.asarray(self.row_src, dtype=np.int64),
                             "dst_gpu": np.asarray(self.row_dst, dtype=np.int64),
                             "bytes": np.asarray(self.row_bytes, dtype=np.int64),
                             "start_s": np.asarray(self.row_start, dtype=np.float64),
                             "end_s": np.asarray(self.row_end, dtype=np.float64)})

    def transfers_frame(self) -> pd.DataFrame:
        """kv_transfers.csv: one row per (request, src GPU, dst GPU): KV bytes, first start, last end."""
        f = self.flows_frame()
        if f.empty:
            return f
        g = f.groupby(["request_id", "src_gpu", "dst_gpu"], sort=True)
        out = g.agg(bytes=("bytes", "sum"), start_s=("start_s", "min"), end_s=("end_s", "max")).reset_index()
        return out[["request_id", "bytes", "src_gpu", "dst_gpu", "start_s", "end_s"]]

    def per_request(self) -> pd.DataFrame:
        """Index request id: kv_bytes, kv_transfer_start (first flow's start), flows."""
        f = self.flows_frame()
        g = f.groupby("request_id", sort=True)
        return g.agg(kv_bytes=("bytes", "sum"), kv_transfer_start=("start_s", "min"), flows=("bytes", "size"))
