"""Model facts and loading: ``families`` (one entry per supported model family: classes, processor classes,
presets, and the readers of every model-specific fact from a config: vision layout, deepstack, experts, tokens),
``loading`` (hub id, folder or ``s3://``, with the processor that works without torchvision),
``adapters`` (LoRA on the language model, the weight sync's merge, adapter folders), ``frozen_vision`` (a frozen
vision tower and its per-step feature cache),
``vision_speedups`` (exact vision-tower speed-ups), ``flops`` (true training FLOPs for MFU),
``colocate_memory`` (does a colocated vLLM engine fit beside the trainer: the preflight) and
``warm_start`` (the tiny model's supervised warm start). Importing this package imports nothing heavy.
"""
