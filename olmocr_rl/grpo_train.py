"""Train a vision-language OCR model with GRPO on olmOCR-bench unit-test rewards.

    python -m olmocr_rl.grpo_train --config configs/tiny-cpu.yaml                 # CPU demo, tiny model
    python -m olmocr_rl.grpo_train --train_bench_data_folder bench/ --model_name Qwen/Qwen2.5-VL-7B-Instruct \\
        --reward_bench --reward_front_matter --reward_eos --num_generations 28 --gradient_accumulation_steps 28

The phases, in order: parse and validate flags (before anything heavy loads) -> check W&B's credentials
(with --report_to wandb) -> validate the bench folder -> find the checkpoint to resume from (local, or
pulled from S3) -> build datasets -> load model and processor -> build rewards -> build the trainer
(plain TRL GRPO, or OlmoRL with --olmorl) -> train -> save model + processor.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

from olmocr_rl.config import ConfigError, build_grpo_config, parse_args, validate

logger = logging.getLogger("olmocr_rl.grpo_train")


def global_rank() -> int:
    """Global rank from the launcher's environment (olmocr_rl.ranks, the one notion of main process)."""
    from olmocr_rl.ranks import global_rank as rank

    return rank()


def setup_logging() -> None:
    level = logging.INFO if global_rank() == 0 else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("httpx", "urllib3", "botocore", "filelock", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _fail(message: str, code: int = 2) -> int:
    """One ``error:`` line on stderr (a multi-line message, e.g. from the hub client, is joined)."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"error: {line}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    setup_logging()

    # --- 1. flags ---------------------------------------------------------------------------------
    args = parse_args(argv)  # a parse error prints one `error:` line and exits 2
    try:
        resolved = validate(args)
    except ConfigError as exc:
        return _fail(str(exc))
    for notice in resolved.notices:  # each logged once, here
        (logger.warning if notice.startswith("WARNING:") else logger.info)(notice)
    if "wandb" in args.report_to and global_rank() == 0:  # the W&B run lives on the global main process only
        from olmocr_rl.wandb_check import wandb_credentials_problem

        os.environ.setdefault("WANDB_PROJECT", args.wandb_project)  # before W&B reads its settings
        problem = wandb_credentials_problem()
        if problem:
            return _fail(problem, code=1)

    # --- 2. bench data, checked before any model loads ---------------------------------------------
    from olmocr_rl.validate_bench import validate_bench_folder

    test_types = args.bench_type_filter or None
    folders = {args.train_bench_data_folder}
    if args.eval_steps is not None and args.eval_bench_data_folder:
        folders.add(args.eval_bench_data_folder)
    scans = {}  # each folder read once: the datasets below take validation's scan
    for folder in sorted(folders):
        report = validate_bench_folder(folder, jsonl_filter=args.jsonl_filter, test_types=test_types)
        scans[folder] = report.scan
        if not report.ok:
            print(report.format(), file=sys.stderr)
            return _fail(f"bench folder {folder} has problems (listed above); fix them, or check them with "
                         f"`python -m olmocr_rl.validate_bench {folder}`", code=1)
    os.makedirs(args.output_dir, exist_ok=True)

    # The checkpoint to resume from (pulled from S3 on a fresh machine), found before the model loads.
    from olmocr_rl.storage import StorageError

    try:
        resume = _resume_checkpoint(args)
    except StorageError as exc:  # resuming was asked for and S3 cannot be read: starting over would be wrong
        return _fail(f"--resume_from_checkpoint: {exc}", code=1)
    if args.s3_save_path:  # a mistyped bucket or missing credentials now, not as log lines at the first save
        from olmocr_rl.storage import check_s3_access

        try:
            check_s3_access(args.s3_save_path)
        except StorageError as exc:
            return _fail(f"--s3_save_path: {exc}", code=1)

    # --- 3. datasets, before the model: a page filter that leaves no page fails fast ------------------
    from olmocr_rl.data.dataset import BenchDataError, OlmOCRBenchDataset

    try:  # validate_bench checked the files; what can still fail is a page filter that leaves no page
        train_dataset = OlmOCRBenchDataset(
            args.train_bench_data_folder, max_samples=args.max_train_samples,
            target_longest_image_dim=args.target_longest_image_dim, jsonl_filter=args.jsonl_filter,
            test_types=test_types, pages=args.pages, exclude_pages=args.exclude_pages,
            scan=scans[args.train_bench_data_folder],
        )
        eval_dataset = None
        if args.eval_steps is not None:
            eval_dataset = OlmOCRBenchDataset(
                args.eval_bench_data_folder or args.train_bench_data_folder,
                max_samples=args.max_eval_samples, target_longest_image_dim=args.target_longest_image_dim,
                jsonl_filter=args.jsonl_filter, test_types=test_types, pages=args.pages,
                exclude_pages=args.exclude_pages, scan=scans[args.eval_bench_data_folder or args.train_bench_data_folder],
            )
    except BenchDataError as exc:
        return _fail(" ".join(line.strip() for line in str(exc).splitlines()), code=1)
    logger.info("train pages:\n%s", train_dataset.describe())

    # --- 4. model and processor --------------------------------------------------------------------
    from olmocr_rl.models import ModelLoadError, load_model_and_processor

    if resolved.vllm_mode == "colocate":
        problem = colocate_memory_problem(args, resolved)
        if problem:
            return _fail(problem, code=1)
    try:
        model, processor = load_model_and_processor(args.model_name, cache_dir=args.cache_dir)
    except ModelLoadError as exc:
        return _fail(str(exc), code=1)
    except OSError as exc:  # hub id not reachable offline, missing files
        return _fail(f"cannot load --model_name {args.model_name}: {exc}", code=1)
    from olmocr_rl.vision_speedups import apply_vision_speedups

    batched_attention = args.batched_vision_attention
    if batched_attention is None:
        import torch

        batched_attention = torch.cuda.is_available()
    for speedup in apply_vision_speedups(model, share_pages=args.share_page_encoding,
                                         batched_attention=batched_attention):
        logger.info("vision tower: %s", speedup)

    # --- 5. rewards ----------------------------------------------------------------------------------
    from olmocr_rl.rewards import build_reward_functions
    from olmocr_rl.telemetry import DetailedRewardLogger

    reward_logger = DetailedRewardLogger()
    try:
        reward_funcs, reward_weights, reward_names = build_reward_functions(
            resolved.reward_spec, eos_token_id=processor.tokenizer.eos_token_id,
            raw_completion=args.bench_raw_completion, reward_logger=reward_logger,
        )
    except ValueError as exc:
        return _fail(str(exc))
    logger.info("rewards: %s", ", ".join(f"{n} x {w:g}" for n, w in zip(reward_names, reward_weights)))

    # --- 6. trainer ----------------------------------------------------------------------------------
    grpo_config = build_grpo_config(args, resolved, reward_weights, tokenizer=processor.tokenizer)
    if "wandb" in args.report_to:
        problem = _init_wandb(args, resolved, resume)
        if problem:
            return _fail(problem, code=1)
    extra = {}
    if args.olmorl:
        from olmocr_rl.olmorl_trainer import OlmoRLGRPOTrainer as trainer_cls

        extra = {"active_sampling": args.active_sampling, "active_sampling_max_rounds": args.active_sampling_max_rounds}
    else:
        from olmocr_rl.completions_log import PlainGRPOTrainer as trainer_cls
    with _rollout_backend(args, resolved):
        trainer = trainer_cls(
            **extra, model=model, args=grpo_config, processing_class=processor, reward_funcs=reward_funcs,
            train_dataset=train_dataset.to_trl_dataset(),
            eval_dataset=eval_dataset.to_trl_dataset() if eval_dataset is not None else None,
        )
    from olmocr_rl.resume import install_checkpoint_loader

    install_checkpoint_loader(trainer)  # the checkpoint's weights, whatever key layout it was saved in
    _add_callbacks(trainer, args, reward_names, reward_logger)

    # --- 7. train (resume), save ---------------------------------------------------------------------
    from olmocr_rl.storage import CheckpointMismatchError

    try:
        trainer.train(resume_from_checkpoint=resume)
    except CheckpointMismatchError as exc:  # the checkpoint's weights do not fit --model_name's architecture
        return _fail(f"--resume_from_checkpoint: {exc}", code=1)
    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():  # the processor beside the final model, whatever the Trainer saved
        processor.save_pretrained(args.output_dir)
    _finish(trainer, args)
    return 0


def colocate_memory_problem(args, resolved) -> str | None:
    """On a CUDA GPU: do the colocated engine and the trainer fit (olmocr_rl.colocate_memory)? From the config only."""
    import torch

    if not torch.cuda.is_available():
        return None  # vLLM's CPU engine takes its KV cache from RAM (VLLM_CPU_KVCACHE_SPACE)
    from transformers import AutoConfig

    from olmocr_rl.colocate_memory import check_fit, model_facts
    from olmocr_rl.config import vllm_engine_dtype
    from olmocr_rl.models import MODEL_CLASSES, ModelLoadError, resolve_model_path

    try:
        config = AutoConfig.from_pretrained(resolve_model_path(args.model_name, cache_dir=args.cache_dir))
    except (OSError, ValueError, ModelLoadError) as exc:  # the model load right after reports it properly
        logger.warning("colocate memory check skipped: no config for %s (%s)", args.model_name, exc)
        return None
    if config.model_type not in MODEL_CLASSES:
        return None  # load_model_and_processor names the supported types
    gpu_bytes = torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", "0"))).total_memory
    problem = check_fit(
        model_facts(config), gpu_bytes=gpu_bytes, utilization=args.vllm_gpu_memory_utilization,
        max_model_length=resolved.vllm_max_model_length, engine_dtype=vllm_engine_dtype(args),
        reference_model=args.beta > 0, single_process=resolved.num_processes == 1,
        tensor_parallel=args.vllm_tensor_parallel_size,
    )
    if problem is None:
        logger.info("colocate memory check: vLLM engine and trainer fit on the %.0f GiB GPU", gpu_bytes / 2**30)
    return problem


def _rollout_backend(args, resolved):
    """vLLM backends get our prompt/dtype fixes (olmocr_rl.vllm_rollout); HF generation needs nothing."""
    import contextlib

    if resolved.vllm_mode == "none":
        return contextlib.nullcontext()
    from olmocr_rl.config import vllm_engine_dtype
    from olmocr_rl.vllm_rollout import page_vllm_generation

    return page_vllm_generation({"dtype": vllm_engine_dtype(args)})


def _init_wandb(args, resolved, resume: str | None = None) -> str | None:
    """W&B on the global main process only, with the full flag set as its config; a problem as one line.

    A run resumed from a checkpoint that holds a W&B run id (resume.WandbRunIdCallback) continues that
    run; a fresh start (no checkpoint) begins a new one.
    """
    if global_rank() != 0:
        return None
    import wandb
    from wandb.errors import Error as WandbError

    from olmocr_rl.resume import read_wandb_run
    from olmocr_rl.wandb_check import WAYS_OUT

    os.environ.setdefault("WANDB_PROJECT", args.wandb_project)
    config = {k: v for k, v in vars(args).items()}
    config["resolved_vllm_mode"] = resolved.vllm_mode
    config["num_processes"] = resolved.num_processes
    previous = read_wandb_run(resume)
    run_id = previous["id"] if previous else None
    if run_id:
        logger.info("W&B: continuing run %s (its id is stored in %s)", run_id, resume)
    try:
        wandb.init(project=args.wandb_project, name=args.wandb_run_name, config=config,
                   dir=args.output_dir, id=run_id, resume="allow")
    except WandbError as exc:  # credentials the early check could not judge (another wandb version), server errors
        return f"--report_to wandb: W&B could not start a run ({' '.join(str(exc).split())}); {WAYS_OUT}"
    return None


def _add_callbacks(trainer, args, reward_names: list[str], reward_logger) -> None:
    from olmocr_rl.telemetry import DetailedRewardLoggingCallback
    from olmocr_rl.timing import instrument_trainer
    from olmocr_rl.training_callbacks import MetricsFileCallback, ProgressTableCallback

    # Both add keys to `logs`, so they go before the Trainer's own reporting callbacks (W&B,
    # TensorBoard, which add_callback would put them after) and before the metrics file below.
    trainer.callback_handler.callbacks.insert(0, instrument_trainer(trainer))  # timing/* keys
    if {"olmocr_bench_reward", "olmocr_bench_reward_macroavg"} & set(reward_names):
        DetailedRewardLoggingCallback.attach(trainer, reward_logger)  # bench_reward/* keys; goes first
    trainer.add_callback(MetricsFileCallback(Path(args.output_dir) / "metrics.jsonl"))
    trainer.add_callback(ProgressTableCallback())
    if "wandb" in args.report_to:
        from transformers.integrations import WandbCallback

        from olmocr_rl.resume import WandbRunIdCallback
        from olmocr_rl.training_callbacks import olmocr_wandb_callback

        # olmOCR's W&B names (bench_reward/* at top level), in the Trainer's own callback's place.
        callbacks = trainer.callback_handler.callbacks
        for index, callback in enumerate(callbacks):
            if type(callback) is WandbCallback:
                callbacks[index] = olmocr_wandb_callback()
        trainer.add_callback(WandbRunIdCallback())  # the run id into every checkpoint, before the S3 mirror sends it
    if args.s3_save_path:
        from olmocr_rl.storage import S3SyncCallback

        trainer.add_callback(S3SyncCallback(args.s3_save_path, args.output_dir))  # never fatal to training


def _resume_checkpoint(args) -> str | None:
    from olmocr_rl.storage import resume_checkpoint

    return resume_checkpoint(args.resume_from_checkpoint, args.output_dir, args.s3_save_path)


def _finish(trainer, args) -> None:
    from olmocr_rl.ranks import is_local_main_process, is_main_process
    from olmocr_rl.storage import S3SyncCallback

    summary = {"global_step": trainer.state.global_step, "output_dir": str(Path(args.output_dir).resolve()),
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if is_main_process(trainer.state):
        (Path(args.output_dir) / "run_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    # on_train_end fired before the final save; mirror the final model (and the summary) too (logged,
    # never fatal).
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, S3SyncCallback) and is_local_main_process(trainer.state):  # every node's own files
            callback.sync(wait=True)
    if is_main_process(trainer.state):
        logger.info("done: %d steps, model and processor saved in %s", trainer.state.global_step, args.output_dir)
        if "wandb" in args.report_to:
            import wandb

            if wandb.run is not None:
                wandb.finish()


if __name__ == "__main__":
    sys.exit(main())
