"""What a run logs and where: ``pass_rates`` (per test type and per JSONL pass rates, the
``bench_reward/*`` keys), ``timing`` (where a step's time goes, ``timing/*``), ``history`` (metrics.jsonl
and the console table) and ``wandb_run`` (every W&B concern: credentials, the run, olmOCR's names, the
run id in each checkpoint). Importing this package imports nothing heavy.
"""
