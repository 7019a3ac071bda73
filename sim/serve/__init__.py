"""sim.serve: LLM inference serving simulation (replicas, schedulers, paged KV cache, request metrics).

Layout: costs.py (engine <-> cost-model contract), entities (requests, batches), kv_cache.py (memory
planner, paged blocks), schedulers/ (one module per replica policy, plus the global router),
engine.py (event loop), batch_time.py (stage time from layer kernels), metrics.py, cli.py;
disagg.py + kv_transfer.py (prefill/decode pools, KV cache moved on the fabric), disagg_cli.py.
"""
