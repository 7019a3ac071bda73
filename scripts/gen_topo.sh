#!/bin/sh
# SimAI-style topology generator: accepts gen_Topo_Template.py's flags and writes the same file
# names into the current directory, e.g.
#   scripts/gen_topo.sh -topo Spectrum-X -g 128
#   scripts/gen_topo.sh -topo AlibabaHPN --dp -g 128
#   scripts/gen_topo.sh --ro -g 16 -gt H20 -bw 200Gbps -nvbw 2400Gbps
# clustersim's own templates and options work too (see `clustersim topo -h`). POSIX sh.
PYTHON="${PYTHON:-python3}"
exec "$PYTHON" -m sim.cli topo "$@"
