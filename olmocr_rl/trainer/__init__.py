"""The trainers, on TRL's ``GRPOTrainer`` (trl==1.16.0, pinned: private methods are wrapped).

``plain.PlainGRPOTrainer`` (plain GRPO) is the one ``GRPOTrainer`` subclass: each private method overridden once,
every switch a constructor argument; ``olmorl.OlmoRLGRPOTrainer`` (``--olmorl``) subclasses it with the objective.
Its overrides call ``checkpoint_load`` (resume loads every weight and the optimizer on any device), ``page_order``
(each epoch's page order from seed and epoch), ``completions`` (the completions table with page prompts),
``active_sampling`` (OlmoRL's refills), ``is_telemetry``, ``generation`` and ``padding_free``;
``vllm_generation`` TRL's vLLM backend with the prompt,
dtype and encoder-cache fixes, ``build`` the run's trainer with its callbacks in order, ``compat`` the
private TRL / transformers / vLLM surface all of them rely on, as data, checked before a trainer is built.
Importing this package imports nothing heavy; each module imports TRL itself.
"""
