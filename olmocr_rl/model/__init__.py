"""Model facts and loading: ``families`` (what each supported model family is: class, vision tokens),
``loading`` (hub id, folder or ``s3://``, with the processor that works without torchvision),
``adapters`` (LoRA on the language model, the weight sync's merge, adapter folders), ``frozen_vision`` (a frozen
vision tower and its per-step feature cache),
``vision_speedups`` (exact vision-tower speed-ups), ``flops`` (true training FLOPs for MFU),
``colocate_memory`` (does a colocated vLLM engine fit beside the trainer: the preflight) and
``warm_start`` (the tiny model's supervised warm start). Importing this package imports nothing heavy.
"""
