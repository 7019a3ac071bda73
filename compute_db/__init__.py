"""compute_db package."""
