"""Property tests over random small builds: valid, round-trips, routes are shortest chains."""

from __future__ import annotations

import pytest

hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from topo import Router, build  # noqa: E402
from topo.analysis import validate  # noqa: E402
from topo.simai_file import read_simai_topology, write_simai_topology  # noqa: E402


@st.composite
def fabrics(draw):
    template = draw(st.sampled_from(["spectrum-x", "dcn+", "rail-optimized", "non-rail", "multi-pod"]))
    gps = draw(st.sampled_from([2, 4, 8]))
    servers = draw(st.integers(1, 12))
    params = dict(gpus=gps * servers, gpus_per_server=gps, nics_per_asw=draw(st.sampled_from([2, 4, 8])),
                  psw_count=draw(st.sampled_from([2, 4])), asw_per_psw=64)
    if template != "multi-pod":
        params["dual_tor"] = draw(st.booleans())
        if params["dual_tor"] and template in ("spectrum-x", "rail-optimized"):
            params["dual_plane"] = draw(st.booleans())
    else:
        params["asw_per_psw"] = 2 * gps
        params["core_oversubscription"] = draw(st.sampled_from([1, 2, 4]))
    if draw(st.booleans()):
        params["nics"] = True
        params["gpus_per_nic"] = draw(st.sampled_from([k for k in (1, 2) if gps % k == 0]))
    elif draw(st.booleans()):
        params["nvswitch_chips"] = draw(st.sampled_from([2, 4]))
    return template, params


@settings(max_examples=25, deadline=None)
@given(fabrics(), st.integers(0, 2**31))
def test_random_fabrics(tmp_path_factory, spec, seed):
    template, params = spec
    t = build(template, **params)
    assert validate(t) == []
    f = tmp_path_factory.mktemp("p") / "t.txt"
    write_simai_topology(t, f)
    assert read_simai_topology(f) == t
    r = Router(t)
    a, b = seed % t.num_gpus, (seed // 7) % t.num_gpus
    p = r.path(a, b, seed)
    if a == b:
        assert p == ()
        return
    assert t.links[p[0]].src == a and t.links[p[-1]].dst == b
    assert all(t.links[x].dst == t.links[y].src for x, y in zip(p, p[1:]))
    assert all(t.links[x].dst >= t.num_gpus for x in p[:-1])  # GPUs never forward
    assert p in r.ecmp_paths(a, b, limit=10_000)
    if t.nvlink_domain_of(a) == t.nvlink_domain_of(b):
        assert all(t.links[x].kind == "nvlink" for x in p)
