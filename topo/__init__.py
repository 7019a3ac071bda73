"""Cluster topologies: builders (SimAI templates and beyond), SimAI files, routing, analysis.

Public API: Topology, Node, Link, build, read_simai_topology, write_simai_topology, Router.
"""

from topo.errors import TopoError
from topo.model import Link, Node, Topology
from topo.routing import Router
from topo.simai_file import read_simai_topology, write_simai_topology
from topo.templates import TEMPLATES, build

__all__ = ["TEMPLATES", "Link", "Node", "Router", "Topology", "TopoError", "build",
           "read_simai_topology", "write_simai_topology"]
