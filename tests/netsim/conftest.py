"""tests/netsim helpers (reference_engine.py: the previous flow engine, an independent oracle) import by name."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
