"""The trainer's flags, one declaration each: :class:`ResolvedConfig`, the frozen config the run reads.

Each flag is one field, ``name: type = flag(GROUP, default, help, ...)``: its type after validation, its default
(the one place it is written), its ``--help`` text and group, and where needed the argparse form (``parse``,
``choices``, ``metavar``, ``nargs``, ``aliases``) and the ``GRPOConfig`` field it feeds (``grpo=True``: the field
of its own name). ``flags.build_parser`` generates the parser from these fields (booleans get ``--no-X``; the
``--config`` YAML and the command line fill the same fields), and ``validate`` builds the instance, holding the
value validation settled on where it resolves one (``cfg.loss_type`` normalised, ``cfg.vllm_mode`` the backend
chosen, ...). The fields before the flags are what validation adds. The ``--reward_*`` flags are the reward
table's rows (``config/rewards.py``); their parsed values are ``rewards``.

**Adding a flag**: one field here, in its group. Its argparse ``type`` follows the annotation (``int``, ``float``,
``bool``; anything else is kept as written) unless ``parse=`` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from olmocr_rl.config.environment import Environment
from olmocr_rl.config.rewards import RewardValue
from olmocr_rl.config.values import (
    DEFAULT_TARGET_LONGEST_IMAGE_DIM,
    IS_MODES,
    LORA_TARGET_MODULES,
    LOSS_TYPES,
    MULTI_OBJECTIVE_AGGREGATIONS,
    PROMPT_TEXT_TOKENS,
    VLLM_DTYPES,
    VLLM_MODEL_IMPLS,
    VLLM_MODES,
    CheckpointingFlag,
    json_object,
    optional_float,
    plain,
)
from olmocr_rl.olmorl.settings import ACTIVE_SAMPLING_MAX_ROUNDS

#: The key of a flag's :class:`Flag` in its field's metadata.
FLAG = "olmocr_rl.flag"
#: ``Flag.parse`` when the argparse type follows the field's annotation.
FROM_TYPE: Any = object()

# The parser's groups, in the order --help shows them (a group's place is its first field's).
CONFIG = "config"
DATA = "data"
MODEL = "model"
ADAPTERS = "what is trained: LoRA adapters, frozen vision tower (docs/lora.md)"
OPTIMISATION = "optimisation"
SPEED = "speed (exact: the same numbers as the stock model)"
GRPO = "GRPO"
TRL_KNOBS = ("GRPO knobs (TRL GRPOConfig fields: same name, same default; --olmorl fixes the clip, entropy and "
             "aggregation ones)")
REWARDS = "rewards (bare flag = weight 1.0; a .jsonl path = weight 1.0 on that file's tests)"
BACKEND = "generation backend"
LOGGING = "logging, checkpoints, resume"
CONSOLE = "console"


@dataclass(frozen=True)
class Flag:
    """One flag's declaration (see the module docstring); ``flags.build_parser`` turns it into an argument."""

    group: str
    default: Any
    help: str
    parse: Callable[[Any], Any] | None = FROM_TYPE
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    nargs: str | None = None
    const: Any = None
    action: Any = None  # an argparse action (class or name) instead of the annotation's
    aliases: tuple[str, ...] = ()
    grpo: bool | str = False  # the GRPOConfig field it feeds: True = the field of the flag's name


def flag(group: str, default: Any, help: str, **form: Any) -> Any:
    """A dataclass field that is a flag (``form``: the optional :class:`Flag` attributes)."""
    return field(metadata={FLAG: Flag(group, default, help, **form)})


@dataclass(frozen=True)
class ResolvedConfig:
    """Everything the run needs from its flags, decided once, read-only (see the module docstring)."""

    # ---- added by validation (not flags) ---------------------------------------------------------------
    flags: Mapping[str, Any]  # every flag as parsed (read-only; lists as tuples)
    environment: Environment
    rewards: Mapping[str, RewardValue]  # the enabled rewards' parsed values, in the reward table's order
    vllm_engine_dtype: str  # the colocated engine's dtype (--vllm_dtype, or the trainer's own)
    notices: tuple[str, ...]  # for the entrypoint to log, once; "WARNING: ..." ones as warnings
    from_config_file: frozenset[str]  # the flags whose value is the --config file's (not given on the command line)
    # ---- config ---------------------------------------------------------------------------------------------------
    config: str | None = flag(CONFIG, None, "YAML file of flag values (keys are flag names without --)")

    # ---- data -----------------------------------------------------------------------------------------------------
    # required (validation refuses a run without it)
    train_bench_data_folder: str = flag(DATA, None, "bench folder: *.jsonl unit tests + pdfs/ (+ optional "
        "claude_original/). Required.")
    eval_bench_data_folder: str | None = flag(DATA, None, "eval bench folder (default: the train folder)")
    jsonl_filter: str | None = flag(DATA, None, "case-insensitive regex searched in each JSONL basename; only "
        "matching files are used")
    bench_type_filter: tuple[str, ...] | None = flag(DATA, None, "keep only tests of this type (repeatable: "
        "--bench_type_filter table --bench_type_filter math)", action="append", metavar="TYPE")
    pages: str | None = flag(DATA, None, "keep only pages whose name <pdf>:<page> (e.g. counting.pdf:2) matches this "
        "regex (train and eval sets); '' keeps every page (clears a --config file's pages:). `python -m "
        "olmocr_rl.validate_bench DIR --list_pages` lists a folder's page names", metavar="REGEX")
    exclude_pages: str | None = flag(DATA, None, "drop pages whose name matches this regex, e.g. to hold pages out "
        "for evaluate; '' drops none", metavar="REGEX")
    max_train_samples: int | None = flag(DATA, None, "use only the first N pages (sorted)")
    max_eval_samples: int | None = flag(DATA, 10, "use only the first N eval pages")
    target_longest_image_dim: int = flag(DATA, DEFAULT_TARGET_LONGEST_IMAGE_DIM, "rendered page size (longest side, "
        "px)")

    # ---- model ----------------------------------------------------------------------------------------------------
    model_name: str = flag(MODEL, "Qwen/Qwen2.5-VL-7B-Instruct", "HF hub id, local folder, or s3://bucket/prefix "
        "(downloaded to --cache_dir)")
    cache_dir: str | None = flag(MODEL, None, "local cache for s3:// models (default ~/.cache/olmocr_rl/s3)")
    output_dir: str = flag(MODEL, "outputs/grpo_test", "checkpoints, final model and metrics.jsonl", grpo=True)

    # ---- what is trained: LoRA adapters, frozen vision tower ------------------------------------------------------
    use_peft: bool = flag(ADAPTERS, False, "train LoRA adapters (Hu et al. 2021, "
        "https://huggingface.co/papers/2106.09685) on the language model instead of every weight: the base model "
        "stays frozen and only the adapters get gradients and AdamW state (a 7B model then fits one 80 GB GPU beside "
        "colocated vLLM). The vision tower gets no adapters (vLLM cannot serve LoRA on it) and stays frozen. LoRA "
        "usually wants a ~10x larger --learning_rate than full fine-tuning")
    lora_r: int = flag(ADAPTERS, 16, "LoRA rank (--use_peft)")
    lora_alpha: int = flag(ADAPTERS, 32, "LoRA alpha (--use_peft): each adapter's update is scaled by lora_alpha / "
        "lora_r")
    lora_dropout: float = flag(ADAPTERS, 0.0, "dropout on the adapters' input (--use_peft). 0 by default, unlike "
        "TRL's ModelConfig (0.05): in GRPO the importance ratio compares the trainer's log-probs with the sampler's "
        "(vLLM, or the same weights one forward earlier), and dropout makes them differ with equal weights")
    lora_target_modules: tuple[str, ...] = flag(ADAPTERS, list(LORA_TARGET_MODULES), "the language model's linear "
        "layers that get adapters (--use_peft), by name, or all-linear for every one of them; never the vision tower, "
        "nor lm_head (TRL reads its weight directly)", nargs="+", metavar="NAME")
    lora_modules_to_save: tuple[str, ...] | None = flag(ADAPTERS, None, "modules trained in full beside the adapters "
        "and saved with them (--use_peft), e.g. merger (the vision-language projector), or embed_tokens where it is "
        "not tied to lm_head (lm_head itself cannot: TRL reads its weight directly)", nargs="+", metavar="NAME")
    save_merged: bool = flag(ADAPTERS, True, "with --use_peft, the final output folder holds the adapter merged into "
        "the base model at its root (a full model, as a full fine-tune leaves it: evaluate, soup and vLLM take it as "
        "is) and the adapter alone in OUTPUT_DIR/adapter/; false: the adapter alone at the root, as TRL saves it")
    freeze_vision_tower: bool = flag(ADAPTERS, False, "do not train the vision tower (its ViT blocks and patch "
        "embedding); the merger, the projector into the language model, stays trainable unless "
        "--freeze_vision_merger. The tower then has no gradients or AdamW state, and each page's tower features are "
        "computed once per step (--cache_vision_features). As verl and EasyR1 offer for VLM RL")
    freeze_vision_merger: bool = flag(ADAPTERS, False, "do not train the vision merger (the projector from the vision "
        "tower into the language model)")

    # ---- optimisation ---------------------------------------------------------------------------------------------
    learning_rate: float = flag(OPTIMISATION, 2e-06, "peak learning rate", grpo=True)
    lr_schedule: str = flag(OPTIMISATION, "linear", "learning-rate schedule after warmup (constant changes only the "
        "scheduler)", choices=("linear", "constant"))
    warmup_steps: int = flag(OPTIMISATION, 100, "linear warmup steps", grpo=True)
    num_train_epochs: float = flag(OPTIMISATION, 1, "epochs over the train pages", grpo=True)
    max_steps: int = flag(OPTIMISATION, -1, "stop after N optimizer steps (overrides epochs)", grpo=True)
    per_device_train_batch_size: int = flag(OPTIMISATION, 1, "completions per device per micro-step", grpo=True)
    per_device_eval_batch_size: int = flag(OPTIMISATION, 1, "eval completions per device", grpo=True)
    gradient_accumulation_steps: int = flag(OPTIMISATION, 8, "micro-steps per optimizer step (TRL also uses it as "
        "steps_per_generation)", grpo=True)
    # auto | true | false | vision (olmocr_rl.model.grad_checkpointing plans it)
    gradient_checkpointing: str = flag(OPTIMISATION, "auto", "recompute activations in the backward pass to save "
        "memory (Chen et al. 2016, 'Training Deep Nets with Sublinear Memory Cost'): true = every layer (TRL's "
        "default), vision = the vision tower only, false = none, auto = the least recomputation with which the "
        "largest micro-batch fits the GPU (none, the vision tower, the vision tower and some decoder layers, or all), "
        "from activation sizes measured on one layer of the model (olmocr_rl/model/grad_checkpointing.py)",
        action=CheckpointingFlag)
    seed: int = flag(OPTIMISATION, 42, "seed for data order, sampling and init", grpo=True)
    dataloader_num_workers: int = flag(OPTIMISATION, 0, "dataloader worker processes (0: render in the trainer, where "
        "the page cache serves all G samples of a page; workers pickle every copy back, measured slower in "
        "docs/data.md)", grpo=True)

    # ---- speed ----------------------------------------------------------------------------------------------------
    share_page_encoding: bool = flag(SPEED, True, "encode each distinct page image once per forward and reuse its "
        "features for the G copies of the page (generation prefill and training)")
    share_page_processing: bool = flag(SPEED, True, "run the image processor once per distinct page image of a step "
        "and repeat its pixel values for the G copies of the page (TRL processes every copy, twice per step)")
    padding_free: bool = flag(SPEED, True, "pack each micro-batch's real tokens into one row for the training "
        "forwards, attention kept inside each sequence (SDPA per sequence, or flash attention's variable-length "
        "path), so padding costs no compute (sequence packing without cross-contamination, Krell et al. 2021); other "
        "attention implementations and model families run the padded forward")
    shared_prefix: bool = flag(SPEED, True, "forward each group's page prompt (the same tokens and pixels) once in "
        "the training log-prob forwards and backward (old-policy and reference log-probs included): one row per "
        "micro-batch holding each prompt once, each completion attending to its prompt and to itself, with the "
        "stock M-RoPE positions, and the prompt's keys and values kept across the micro-steps of an optimizer step "
        "(one completion a micro-batch too), so the page's tokens go through the language model once instead of G "
        "times; and, "
        "with HF generation (--vllm_mode none), prefill each page prompt once and copy its KV cache to the G "
        "samples (the same samples for the same seed). Exact (Qwen2.5-VL, Qwen3-VL dense and MoE, with SDPA); "
        "each part checks itself against the stock path on first use and falls back with one warning line; other "
        "families, flash or eager attention and rows without a partner run the stock forward")
    # resolved: auto = on with a CUDA GPU, off with vLLM (HF generation only)
    compiled_generation: bool = flag(SPEED, None, "HF generation with a static KV cache and torch.compile'd decoding "
        "steps, the cache sized by prompt lengths bucketed to 256 tokens so the compiled step is reused (TRL turns "
        "compilation off). Default: on with a CUDA GPU; off on CPU, where compiling measured slower than it saves "
        "(scripts/bench/bench_generation.py). No effect with vLLM")
    # resolved: auto = on with a CUDA GPU
    batched_vision_attention: bool = flag(SPEED, None, "run the vision tower's window attention as one batched call "
        "per window size instead of transformers' per-window loop (SDPA/eager; flash attention is already batched). "
        "Default: on with a CUDA GPU, where the loop's ~100 kernel launches per image and layer dominate; off on CPU, "
        "where it measured no faster (scripts/bench/bench_vision.py)")
    cache_vision_features: bool = flag(SPEED, True, "with the vision tower frozen (--freeze_vision_tower, or "
        "--use_peft), encode each distinct page once per optimizer step and reuse its tower features in every forward "
        "of that step (generation prefill, old log-probs, each micro-batch); the merger still runs, with gradients "
        "when it is trained (scripts/bench/bench_frozen_vision.py)")

    # ---- GRPO -----------------------------------------------------------------------------------------------------
    num_generations: int = flag(GRPO, 28, "completions sampled per page (group size G); --num_completions is an alias",
        aliases=("--num_completions",), grpo=True)
    num_iterations: int = flag(GRPO, 1, "GRPO's mu: policy updates per generation batch (NOT the number of training "
        "steps)", grpo=True)
    max_completion_length: int = flag(GRPO, 8000, "max new tokens per completion", grpo=True)
    temperature: float = flag(GRPO, 0.8, "sampling temperature", grpo=True)
    top_p: float = flag(GRPO, 1.0, "nucleus sampling", grpo=True)
    generation_kwargs: Mapping[str, Any] | None = flag(GRPO, None, "extra sampling arguments for the generation "
        'backend, e.g. \'{"min_new_tokens": 256}\' (HF) or \'{"min_tokens": 256}\' (vLLM)',
        parse=json_object, metavar="JSON")
    beta: float = flag(GRPO, 0.0, "KL coefficient; > 0 builds a frozen reference model", grpo=True)
    # resolved: TRL's spelling
    loss_type: str = flag(GRPO, "bnpo", f"TRL loss formulation: {', '.join(LOSS_TYPES)}", grpo=True)
    # resolved: group | batch | none
    scale_rewards: str = flag(GRPO, "group", "advantage scaling: group (divide by group std), batch, or none "
        "(true=group, false=none)", grpo=True)
    importance_sampling_level: str = flag(GRPO, "token", "importance ratio per token, or per sequence (GSPO)",
        choices=("token", "sequence"), grpo=True)
    cast_lm_head_to_fp32: bool = flag(GRPO, False, "compute the LM head in fp32", grpo=True)
    vllm_importance_sampling_correction: bool = flag(GRPO, True, "correct for vLLM-vs-trainer log-prob mismatch (vLLM "
        "only)", grpo=True)
    vllm_importance_sampling_mode: str = flag(GRPO, "sequence_mask", "how the vLLM IS ratio is constrained",
        choices=IS_MODES, grpo=True)
    vllm_importance_sampling_cap: float | None = flag(GRPO, 3.0, "upper bound C_max of the vLLM IS ratio (TRL: "
        "vllm_importance_sampling_clip_max; --vllm_importance_sampling_clip_max is an alias): *_truncate modes clip "
        "ratios above it, *_mask modes zero them; none = no upper bound. A sequence ratio is the product of its "
        "tokens' ratios, so sequence_* modes need a larger cap on long pages (docs/vllm.md)",
        parse=optional_float, aliases=("--vllm_importance_sampling_clip_max",),
        grpo="vllm_importance_sampling_clip_max")
    olmorl: bool = flag(GRPO, False, "OLMo 3's OlmoRL objective: no std normalisation, zero-signal groups dropped, "
        "clip-higher (0.2/0.272), token-level loss, beta 0")
    active_sampling: bool = flag(GRPO, False, "OlmoRL only: generate groups from further pages (drawn by a sampler seeded per step) until "
        "every optimizer step holds its full number of groups with signal (costs extra generation; docs/olmorl.md)")
    active_sampling_max_rounds: int = flag(GRPO, ACTIVE_SAMPLING_MAX_ROUNDS, "at most N extra generation rounds per "
        "step for --active_sampling; a step still short after them trains on what it has (logged)", metavar="N")
    # None: the MoE config's own (refused for a dense model before the GRPOConfig is built)
    router_aux_loss_coef: float | None = flag(GRPO, None, "mixture-of-experts models only (Qwen3-VL-MoE): weight of "
        "the router's load-balancing loss added to the GRPO loss (Switch Transformers, Fedus et al. 2021; TRL's "
        "router_aux_loss_coef), logged as aux_loss; default: the model config's router_aux_loss_coef (0.001 in "
        "Qwen3-VL-30B-A3B); 0 turns it off", metavar="W", grpo=True)
    macro_average: bool = flag(GRPO, False, "use the macro-averaged bench reward (alias: turns --reward_bench into "
        "--reward_bench_macroavg)")

    # ---- GRPO knobs -----------------------------------------------------------------------------------------------
    epsilon: float = flag(TRL_KNOBS, 0.2, "TRL epsilon: lower clip of the policy ratio, clip(ratio, 1 - epsilon, 1 + "
        "epsilon_high) (PPO, Schulman et al. 2017)", grpo=True)
    epsilon_high: float | None = flag(TRL_KNOBS, None, "TRL epsilon_high: upper clip of the policy ratio; none = "
        "--epsilon. DAPO (Yu et al. 2025) recommends 0.28 ('clip-higher'); with --loss_type cispo it is ScaleRL's "
        "eps_max (5.0)", parse=optional_float, grpo=True)
    delta: float | None = flag(TRL_KNOBS, None, "TRL delta: two-sided GRPO, the unclipped ratio is also capped at "
        "delta (INTELLECT-2 tech report, 2025); should exceed 1 + epsilon_high; none = standard clipping",
        parse=optional_float, grpo=True)
    mask_truncated_completions: bool = flag(TRL_KNOBS, False, "TRL mask_truncated_completions: leave completions that "
        "reach --max_completion_length without EOS out of the loss (DAPO's overlong filtering: a page that loops "
        "until the cap is not trained on as if it had ended)", grpo=True)
    top_entropy_quantile: float = flag(TRL_KNOBS, 1.0, "TRL top_entropy_quantile: train only on the top-rho share of "
        "tokens by entropy; 1.0 = every token ('Beyond the 80/20 Rule', Wang et al. 2025, recommends 0.2)", grpo=True)
    off_policy_mask_threshold: float | None = flag(TRL_KNOBS, None, "TRL off_policy_mask_threshold: drop sequences "
        "with negative advantage whose KL from the sampling policy exceeds this (DeepSeek-V3.2's off-policy sequence "
        "masking, e.g. 0.5); none = off", parse=optional_float, grpo=True)
    entropy_coef: float = flag(TRL_KNOBS, 0.0, "TRL entropy_coef: weight of a mean per-token entropy bonus in the "
        "loss (keeps exploration; Skywork-OR1, He et al. 2025); 0 = none", grpo=True)
    multi_objective_aggregation: str = flag(TRL_KNOBS, "sum_then_normalize", "TRL multi_objective_aggregation: sum "
        "the weighted rewards then normalise, or normalise each reward within its group then sum (GDPO, Liu et al. "
        "2026)", choices=MULTI_OBJECTIVE_AGGREGATIONS, grpo=True)
    steps_per_generation: int | None = flag(TRL_KNOBS, None, "TRL steps_per_generation: micro-steps fed by one "
        "generation batch; none = --gradient_accumulation_steps (larger values reuse one generation over several "
        "optimizer steps, each further off-policy)", metavar="N", grpo=True)
    generation_batch_size: int | None = flag(TRL_KNOBS, None, "TRL generation_batch_size: completions per generation "
        "over all processes (a multiple of per-device batch x processes and of --num_generations); none = from "
        "--steps_per_generation. Set at most one of the two", metavar="N", grpo=True)
    num_generations_eval: int | None = flag(TRL_KNOBS, None, "TRL num_generations_eval: completions per page in "
        "evaluation; none = --num_generations", metavar="G", grpo=True)
    disable_dropout: bool = flag(TRL_KNOBS, False, "TRL disable_dropout: turn the model's dropout off, so log-probs "
        "of the same completion agree between forwards (useful with a --beta reference model)", grpo=True)
    top_k: int = flag(TRL_KNOBS, 0, "TRL top_k: sample from the k most likely tokens; 0 = off. With vLLM's "
        "importance-sampling correction on, truncated sampling biases the ratio (trl#6789; docs/vllm.md)", grpo=True)
    min_p: float | None = flag(TRL_KNOBS, None, "TRL min_p: drop tokens below min_p x the top token's probability; "
        "none = off (same bias as --top_k)", parse=optional_float, grpo=True)
    repetition_penalty: float = flag(TRL_KNOBS, 1.0, "TRL repetition_penalty: > 1 discourages repeating tokens "
        "(Keskar et al. 2019, CTRL); 1.0 = off. vLLM's log-probs include it and the trainer's do not, so it biases "
        "the IS ratio", grpo=True)
    vllm_importance_sampling_clip_min: float | None = flag(TRL_KNOBS, None, "TRL vllm_importance_sampling_clip_min: "
        "lower bound of the vLLM IS ratio (*_truncate: clip below it, *_mask: zero below it); none = no lower bound",
        parse=optional_float, metavar="C_MIN", grpo=True)
    vllm_model_impl: str = flag(TRL_KNOBS, "vllm", "TRL vllm_model_impl: vLLM's own model code, or transformers' "
        "modelling code run by vLLM", choices=VLLM_MODEL_IMPLS, grpo=True)

    # ---- rewards --------------------------------------------------------------------------------------------------
    bench_raw_completion: bool = flag(REWARDS, False, "run bench tests on the raw completion incl. front matter "
        "(olmOCR's behaviour); default: front matter removed, as the benchmark scores it")

    # ---- generation backend ---------------------------------------------------------------------------------------
    # resolved: colocate | server | none
    vllm_mode: str = flag(BACKEND, "auto", "colocate (vLLM in the trainer process; GPU, or vLLM's CPU build), server "
        "(trl vllm-serve), none (HF generate); auto = colocate when vLLM and a CUDA GPU are present, else none (on "
        "CPU, HF generate is faster than starting an engine; the choice is logged)",
        choices=VLLM_MODES)
    vllm_server_host: str = flag(BACKEND, "0.0.0.0", "vLLM server host (server mode)", grpo=True)
    vllm_server_port: int = flag(BACKEND, 8000, "vLLM server port (server mode)", grpo=True)
    vllm_gpu_memory_utilization: float = flag(BACKEND, 0.15, "share of the GPU's memory for the colocated vLLM engine "
        "(weights + KV cache); checked against the model's size before it loads", grpo=True)
    # resolved: the colocated engine's context (derived when not given)
    vllm_max_model_length: int = flag(BACKEND, None, "colocated vLLM's context (prompt + completion); default: the "
        f"page's largest image-token count at --target_longest_image_dim + {PROMPT_TEXT_TOKENS} text tokens + "
        "--max_completion_length (not the model's 128k, whose KV cache would not fit)", metavar="TOKENS", grpo=True)
    vllm_tensor_parallel_size: int = flag(BACKEND, 1, "GPUs per colocated vLLM engine (must divide the number of "
        "training processes)", grpo=True)
    vllm_enable_sleep_mode: bool = flag(BACKEND, False, "offload the colocated engine's weights and KV cache while "
        "the trainer runs its optimizer step (frees GPU memory, costs a weight reload per step; CUDA only)", grpo=True)
    vllm_enforce_eager: bool = flag(BACKEND, False, "run the vLLM engine without torch.compile and CUDA graphs: it "
        "starts much sooner (a tiny model on vLLM's CPU build: about 45 s instead of 160 s, most of it compiling) and "
        "decodes slower on GPUs; for short runs and debugging. Colocate: the engine in this process; server: the "
        "launchers' trl vllm-serve command gets --enforce_eager (a server you start yourself takes that flag)")
    vllm_dtype: str = flag(BACKEND, "auto", "dtype of the colocated vLLM engine; auto = the trainer's (bfloat16 on "
        "GPU, float32 on CPU), so vLLM's log-probs match the trainer's",
        choices=VLLM_DTYPES)
    async_generation: bool = flag(BACKEND, False, "server mode: the server samples the next step's completions "
        "while the trainer trains on this step's (from weights up to --max_staleness steps old, corrected by vLLM's "
        "importance-sampling ratio); a resume regenerates the batch that was in flight (docs/vllm.md)")
    max_staleness: int = flag(BACKEND, 1, "with --async_generation: the most optimizer steps the server's weights "
        "may lag the weights that score its completions; weights are pushed only as often as this needs",
        metavar="STEPS")
    vllm_block_image_tokens: bool = flag(BACKEND, True, "never let vLLM sample <|image_pad|> / <|video_pad|> (one "
        "sampled pad token breaks the training forward); passed as vLLM bad_words in colocate and server mode")

    # ---- logging, checkpoints, resume -----------------------------------------------------------------------------
    logging_steps: int = flag(LOGGING, 5, "log every N optimizer steps", grpo=True)
    save_steps: int = flag(LOGGING, 25, "checkpoint every N optimizer steps", grpo=True)
    save_total_limit: int = flag(LOGGING, 30, "keep at most N checkpoints", grpo=True)
    eval_steps: int | None = flag(LOGGING, None, "evaluate every N steps (default: no evaluation)")
    # resolved: wandb / tensorboard; empty = none
    report_to: tuple[str, ...] = flag(LOGGING, "wandb", "comma list: wandb, tensorboard, none. wandb needs an API key "
        "(`wandb login`, WANDB_API_KEY) or WANDB_MODE=offline; it is checked before the model loads")
    wandb_project: str = flag(LOGGING, "olmocr-grpo-v5", "W&B project")
    wandb_run_name: str | None = flag(LOGGING, None, "W&B run name", grpo="run_name")
    log_completions: bool = flag(LOGGING, True, "log the sampled completions every logging step: a console table, "
        "OUTPUT_DIR/completions/*.parquet and the W&B table 'completions' (prompt text, completion, rewards, "
        "advantage, page)", grpo=True)
    num_completions_to_print: int = flag(LOGGING, 2, "sample completions printed per log", grpo=True)
    # TRL's default is True: page images gathered every generation
    log_multimodal: bool = flag(LOGGING, False, "log the page image beside each sampled completion in the W&B "
        "completions table (gathers the page images across ranks at every generation)", grpo=True)
    profile_step: int | None = flag(LOGGING, None, "profile optimizer step N with torch.profiler and write "
        "OUTPUT_DIR/profile_step_N.json: per phase (generation, rewards, training) its wall time, GPU busy share, "
        "kernel count, top operators, and whether it is compute-bound or launch-bound", metavar="N")
    s3_save_path: str | None = flag(LOGGING, None, "s3://bucket/prefix mirrored after every save")
    # resolved: True (newest), a checkpoint folder, or None
    resume_from_checkpoint: bool | str | None = flag(LOGGING, None, "resume: bare flag = the newest checkpoint that "
        "verifies, in --output_dir or on --s3_save_path (pulled when that one is newer; starts fresh when neither has "
        "one; a run already at its last step exits with 'already finished'), or a checkpoint path",
        nargs="?", const=True)
    allow_partial_resume: bool = flag(LOGGING, False, "resume from a checkpoint that has no optimizer.pt or "
        "scheduler.pt (e.g. saved with save_only_model) with a warning: Adam's moments start from zero (the "
        "learning-rate schedule is moved on to the checkpoint's step); without it such a resume is an error")
    apply_learning_rate_on_resume: bool = flag(LOGGING, False, "on resume, train on with this run's "
        "--learning_rate (the checkpoint's schedule state, which holds the learning rate it was saved with, wins "
        "without it)")
    overwrite_output_dir: bool = flag(LOGGING, False, "start a new run in an --output_dir that holds an earlier run's "
        "checkpoints or history: they are deleted first (without it such a start is an error; S3 is never touched)")
    preempt_upload_timeout: float = flag(LOGGING, 240.0, "after SIGTERM/SIGUSR1/SIGINT the run finishes its step, "
        "saves a checkpoint and uploads it to --s3_save_path within this many seconds of the signal (then exits with "
        "status 75; an upload still running then is left, the checkpoint stays on local disk). Slurm's USR1 comes 300 "
        "s before the time limit", metavar="SECONDS")

    # ---- console --------------------------------------------------------------------------------------------------
    console_detail_steps: int | None = flag(CONSOLE, None, "print the per test type and per JSONL pass-rate tables "
        "every N steps (over the steps since the last ones) and at the end; default: with each checkpoint "
        "(--save_steps); 0 = only at the end. The compact row prints at every logging step", metavar="N")
    console_raw_metrics: bool = flag(CONSOLE, False, "also print the Trainer's raw metrics dict at every logging step "
        "(every key goes to metrics.jsonl and W&B either way)")

    @property
    def num_processes(self) -> int:
        return self.environment.num_processes

    @property
    def reward_weights(self) -> list[float]:
        """The enabled rewards' weights, in order (GRPOConfig's ``reward_weights``; the builder returns the same)."""
        return [value.weight for value in self.rewards.values()]

    def as_dict(self) -> dict[str, Any]:
        """Flags with the resolved values on top (W&B's run config)."""
        resolved = {f.name: getattr(self, f.name) for f in fields(self)
                    if f.name not in ("flags", "environment", "from_config_file")}
        out = {**self.flags, **resolved, "resolved_vllm_mode": self.vllm_mode, "num_processes": self.num_processes}
        return {k: plain(v) for k, v in out.items()}


def declared(config_class: type | None = None) -> list[tuple[str, str, Flag]]:
    """``(name, annotation, Flag)`` of every flag field of ``config_class`` (default: :class:`ResolvedConfig`, looked
    up at each call), in declaration order."""
    config_class = config_class or globals()["ResolvedConfig"]
    return [(f.name, f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)), f.metadata[FLAG])
            for f in fields(config_class) if FLAG in f.metadata]


def grpo_fields() -> dict[str, str]:
    """Flag name -> the GRPOConfig field it feeds unchanged, for the flags that declare one."""
    return {name: (name if spec.grpo is True else spec.grpo) for name, _, spec in declared() if spec.grpo}
