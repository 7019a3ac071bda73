"""Memory and cost analysis, parallel-strategy search, PerfLLM-style API."""
