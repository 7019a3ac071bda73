"""Cluster topologies: builders (SimAI templates and beyond), SimAI files, routing, analysis.

Public API: Topology, Node, Link, build, read_simai_topology, write_simai_topology, Router.
"""

# Public names, imported on first use so that light commands (`clustersim --help`) do not pay for numpy
# and friends (PEP 562).
_EXPORTS = {
    "TEMPLATES": "topo.templates",
    "Link": "topo.model",
    "Node": "topo.model",
    "Router": "topo.routing",
    "Topology": "topo.model",
    "TopoError": "topo.errors",
    "build": "topo.templates",
    "read_simai_topology": "topo.simai_file",
    "write_simai_topology": "topo.simai_file",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
