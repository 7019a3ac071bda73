"""Arguments of trace slices (shown by Perfetto when a slice is selected).

The engine's trace entries are (stage, thread, name, start_s, dur_s, category, ref) with ref the
ComputeOp of a kernel, the engine Handle of a communication or of a wait, or None. annotate() replaces
ref by a plain dict, shared by every slice of the same op / operation kind (sim.fastpath's entries hold
that dict from the start, empty, one per args_key: annotate fills it in place):
- kernel: kind, shape (dims), dtype, flops, bytes, provenance (compute_db source or "given"),
  time_alone_s (the kernel's time without communication in flight), layer, variant;
- communication: collective, group (raw kind), group_size, size_bytes, algorithm and protocol (netsim's
  choice for the representative group; "n/a" for a backend without a planner), timing ("network":
  event-driven on the backend, "estimate": idle-network time of an isolated kind), stage and, for
  pipeline sends, peer_stage (the receiving stage; report.chrome_trace draws its flow arrow);
- wait: the operation waited for (name, group); host issue: its cause.
Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations


def _algorithm(backend, collective: str, gpus: tuple, size_bytes: int) -> tuple[str, str]:
    planner = getattr(backend, "planner", None)
    if planner is None or len(gpus) < 2:
        return "n/a", "n/a"
    from netsim.api import CollectiveRequest
    from netsim.calibration import PROTOCOL_NAMES
    alg, proto = planner.choice(CollectiveRequest(collective, tuple(gpus), max(int(size_bytes), 1)))
    return str(alg), str(PROTOCOL_NAMES.get(proto, proto))


_HOST = {"cause": "kernel launch gap and host issue (sim.overheads)"}


def args_key(ref, cat: str):
    """A key shared by trace entries whose arguments annotate() makes equal (entries of category `cat`
    referring to `ref`): annotate shares one dict per key, and sim.fastpath gives such entries one
    argument dict from the start."""
    if ref is None:
        return ("h", cat == "overhead")
    if not getattr(ref, "is_comm", True):
        return ("k", id(ref))
    return _comm_key(ref, cat)


def _comm_key(ref, cat: str) -> tuple:
    """args_key of a communication or wait entry."""
    if cat == "wait":
        return ("w", ref.name, ref.kind)
    if ref.stage < 0:
        return ("x", id(ref))
    return ("c", ref.stage, ref.kind, ref.collective, ref.size_bytes, ref.fast,
            ref.peer_stage if ref.kind == "pp" else -1)


def annotate(trace: list, times: dict, sources: dict, engine, backend) -> list:
    """The trace with each entry's last element replaced by its argument dict (None for host issue);
    entries with one args_key share one dict (trace.json encodes it once)."""
    cache: dict = {}

    def kernel_args(op) -> dict:
        key = ("k", id(op))
        got = cache.get(key)
        if got is None:
            got = cache[key] = {
                "kind": op.kind, "shape": dict(op.shape), "dtype": op.dtype, "flops": float(op.flops),
                "bytes": float(op.bytes), "provenance": sources.get(id(op), "n/a"),
                "time_alone_s": times.get(id(op)), "layer": op.layer, "variant": op.variant}
        return got

    def comm_args(h, cat: str) -> dict:
        key = _comm_key(h, cat)
        got = cache.get(key)
        if got is None:
            got = cache[key] = _comm_dict(h, cat, engine, backend)
        return got

    def args_of(ref, cat: str) -> dict | None:
        if ref is None:
            return _HOST if cat == "overhead" else None
        if not getattr(ref, "is_comm", True):      # a kernel (workload ops); engine handles lack is_comm
            return kernel_args(ref)
        return comm_args(ref, cat)

    slots = getattr(engine, "trace_slots", None)
    if slots is not None:
        # sim.fastpath's trace: its entries already hold their (empty, shared) argument dicts; filling
        # those few thousand dicts annotates the 10^5 entries without making them again
        for args, ref, cat in slots[1]:
            if not args:
                args.update(args_of(ref, cat) or ())
        return trace
    # a ref is a kernel by its type (is_comm False: workload ops); engine handles lack is_comm, and
    # getattr with a default would raise and catch an exception per entry (~10^5 entries)
    is_kernel: dict[type, bool] = {}
    out = []
    append = out.append
    if not all(map((7).__eq__, map(len, trace))):
        trace = [tuple(ev[:6]) + ((ev[6] if len(ev) > 6 else None),) for ev in trace]
    for stage, thread, name, start, dur, cat, ref in trace:
        if ref is None:
            args = _HOST if cat == "overhead" else None
        else:
            kernel = is_kernel.get(type(ref))
            if kernel is None:
                kernel = is_kernel[type(ref)] = not getattr(ref, "is_comm", True)
            args = kernel_args(ref) if kernel else comm_args(ref, cat)
        append((stage, thread, name, start, dur, cat, args))
    return out


def _comm_dict(h, cat: str, engine, backend) -> dict:
    """Arguments of a communication entry (see the module docstring), of a wait, or of a cross-stage
    operation (stage < 0: its group only)."""
    if cat == "wait":
        return {"waits_for": h.name, "group": h.kind}
    if h.stage < 0:
        return {"group": h.kind}
    pp = h.kind == "pp"
    gpus = engine._pp_pairs(h.stage, h.peer_stage)[0] if pp else engine._groups_for(h.kind, h.stage)[0]
    alg, proto = _algorithm(backend, h.collective, gpus, h.size_bytes)
    got = {"collective": h.collective, "group": h.kind, "group_size": h.group_size, "size_bytes": h.size_bytes,
           "algorithm": alg, "protocol": proto, "timing": "estimate" if h.fast else "network", "stage": h.stage}
    if pp:
        got["peer_stage"] = h.peer_stage
    return got


LINK_SERIES_KEPT = 32    # hottest links kept on a traced report; the trace shows the first N of them


def link_loads(backend, top_n: int = LINK_SERIES_KEPT) -> dict:
    """{"links": [netsim.linktrace.LinkSeries, hottest first], "note": what they show or why there are none}."""
    engine = getattr(backend, "engine", None)
    if engine is None or getattr(backend, "kind", "") != "flow":
        return {"links": [], "note": f"no link counters: the {getattr(backend, 'kind', type(backend).__name__)} "
                                     "network backend has no link loads (use --network flow)"}
    if not getattr(engine, "record_link_changes", False):
        return {"links": [], "note": "no link counters: the flow backend was made without record_link_changes"}
    from netsim.linktrace import hottest_links
    note = ("utilisation = carried rate / effective capacity of the hottest links by busy time "
            "(bytes carried / capacity); only traffic simulated on the network: groups left out by "
            "symmetric sampling and collectives timed by estimate (isolated NVLink kinds) put no load")
    stopped = engine.link_changes_stopped_s
    if stopped == stopped:
        note += (f"; recording stopped at {stopped:.6g} s (more than {engine.link_changes_limit:,} load changes): "
                 "counters end there")
    return {"links": hottest_links(backend, top_n), "note": note}
