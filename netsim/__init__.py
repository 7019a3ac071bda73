"""netsim package."""
