"""Train a vision-language OCR model with GRPO on olmOCR-bench unit-test rewards.

    python -m olmocr_rl.grpo_train --config configs/tiny-cpu.yaml                 # CPU demo, tiny model
    python -m olmocr_rl.grpo_train --train_bench_data_folder bench/ --model_name Qwen/Qwen2.5-VL-7B-Instruct \\
        --reward_bench --reward_front_matter --reward_eos --num_generations 28 --gradient_accumulation_steps 28

The phases of ``main``, in order, each a function: parse and validate flags into a frozen ResolvedConfig
(before anything heavy loads) -> ``_check_before_loading`` (W&B's credentials with --report_to wandb, the
bench folders, the checkpoint to resume from, local or pulled from S3 -- a run already at its last step stops
here with "already finished" --, the run's lock on --output_dir, S3 access) -> ``_build_datasets`` ->
``_check_trainer_setup`` (the colocated engine fits the GPU; TRL's private surface, trainer/compat.py;
TRL's GRPOConfig, whose own checks run here) ->
``_load_model`` (model and processor) -> ``_build_rewards`` -> ``_build_trainer`` (plain TRL GRPO, or
OlmoRL with --olmorl) -> ``_train_and_save`` (train, save model + processor, mirror). A phase that cannot go
on raises ``_Stop``, which ``main`` turns into one ``error:`` line. The exit statuses are
olmocr_rl.launch.status's: 0 done, 1 error, 2 bad flags, 74 the final S3 mirror failed, 75 preempted (a
SIGTERM, SIGUSR1 or SIGINT saved the step it arrived in; trainer.preemption).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

from olmocr_rl.config import ConfigError, ResolvedConfig, build_grpo_config, parse_args, validate
from olmocr_rl.config.environment import cuda_available
from olmocr_rl.launch import status
from olmocr_rl.ranks import is_main_process

logger = logging.getLogger("olmocr_rl.grpo_train")


def setup_logging() -> None:
    level = logging.INFO if is_main_process() else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("httpx", "urllib3", "botocore", "filelock", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _Stop(Exception):
    """A phase cannot go on: ``message`` becomes the one ``error:`` line, ``code`` the exit status."""

    def __init__(self, message: str, code: int = status.ERROR):
        super().__init__(message)
        self.message, self.code = message, code


class _Done(Exception):
    """Nothing to do (the run already finished): ``message`` is logged, the exit status is 0."""


def _fail(message: str, code: int = status.BAD_FLAGS) -> int:
    """One ``error:`` line on stderr (a multi-line message, e.g. from the hub client, is joined)."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"error: {line}", file=sys.stderr)
    return code


def keep_peft_out(argv: list[str]) -> None:
    """Before transformers loads: a run without ``--use_peft`` marks ``peft`` absent for this process.

    transformers and TRL import peft whenever it is installed (seconds of start-up); with
    ``sys.modules["peft"] = None`` (the import system's mark for a module that is not there) their
    ``is_peft_available()`` is false and nothing loads it, so only a LoRA run pays for LoRA. Only for a fresh
    process, the command line's (:func:`cli`): where transformers or peft is already loaded it does nothing. A bad
    flag exits as :func:`main` would (one ``error:`` line, status 2)."""
    if "peft" in sys.modules or "transformers" in sys.modules:
        return
    if not parse_args(argv).use_peft:
        sys.modules["peft"] = None


def keep_engines_out(argv: list[str], environ=os.environ) -> None:
    """Before transformers loads: DeepSpeed, and W&B's client without ``--report_to wandb``, marked absent.

    accelerate imports DeepSpeed whenever it is installed (``extract_model_from_parallel``, called when the
    Trainer is built: 0.3-0.6 s of start-up and about 15 MiB), although only ``accelerate launch`` with a DeepSpeed
    config uses it -- the launcher then sets ``ACCELERATE_USE_DEEPSPEED=true`` in this process's environment (FSDP
    is torch's own). transformers and TRL import ``wandb`` whenever it is installed (another 0.6 s), used only with
    ``--report_to wandb``. Same mark and same rules as :func:`keep_peft_out`; a bad ``--report_to`` is left to
    :func:`main` to report."""
    if "transformers" in sys.modules:
        return
    if "deepspeed" not in sys.modules and environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        sys.modules["deepspeed"] = None
    from olmocr_rl.config.checks import resolve_report_to

    try:
        report_to = resolve_report_to(parse_args(argv))
    except ConfigError:
        return
    if "wandb" not in sys.modules and "wandb" not in report_to:
        sys.modules["wandb"] = None


def cli(argv: list[str] | None = None) -> int:
    """The command line (``python -m olmocr_rl.grpo_train``, ``olmocr-rl-train``): :func:`main` in a fresh process."""
    argv = sys.argv[1:] if argv is None else list(argv)
    keep_peft_out(argv)
    keep_engines_out(argv)
    return main(argv)


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = parse_args(argv)  # a parse error prints one `error:` line and exits 2
    try:
        cfg = validate(args)
    except ConfigError as exc:
        return _fail(str(exc))
    for notice in cfg.notices:  # each logged once, here
        (logger.warning if notice.startswith("WARNING:") else logger.info)(notice)
    from olmocr_rl.storage.lease import release_held
    from olmocr_rl.trainer.stop_signals import install_early, restore

    previous = install_early()  # SIGTERM/SIGUSR1 before training: one line, status 75 (nothing to save yet)
    code = 1  # a bug's traceback: Python exits 1 too
    try:
        code = _run(cfg)
    finally:
        release_held()  # the run's lease on --s3_save_path (storage.lease), whatever the status
        restore(previous, exit_status=code)  # a late signal (a second SIGTERM) ends the process with `code`
    return code


def _run(cfg: ResolvedConfig) -> int:
    """Every phase of the run, in order; the exit status (each stop said in one line)."""
    from olmocr_rl.trainer.stop_signals import Preempted

    try:
        resume, reports = _check_before_loading(cfg)
        train_dataset, eval_dataset = _build_datasets(cfg, reports)
        grpo_config, peft_config, checkpointing = _check_trainer_setup(cfg)
        model, processor = _load_model(cfg)
        rewards = _build_rewards(cfg, processor)
        try:
            trainer = _build_trainer(cfg, grpo_config, model, processor, rewards, train_dataset, eval_dataset,
                                     resume, peft_config, checkpointing)
            return _train_and_save(cfg, trainer, processor, resume)
        finally:
            _stop_reward_workers(rewards[0])
    except _Stop as stop:
        return _fail(stop.message, stop.code)
    except _Done as done:
        logger.info("%s", done)
        return status.OK
    except Preempted as stop:
        print(f"{stop} before training began: nothing to save yet; exiting with status {status.PREEMPTED}",
              file=sys.stderr)
        return status.PREEMPTED
    except KeyboardInterrupt:
        print("interrupted (SIGINT) before training began: nothing saved", file=sys.stderr)
        return 128 + signal.SIGINT


def _check_before_loading(cfg: ResolvedConfig) -> tuple[str | None, dict]:
    """W&B credentials, the bench folders, the checkpoint to resume from and S3 access, before anything loads.

    Returns the checkpoint to resume from (pulled from S3 on a fresh machine) or None, and each bench folder's
    validation report (the datasets are built from it: every folder is read, and its references parsed, once).
    """
    if "wandb" in cfg.report_to and is_main_process():  # the W&B run lives on the global main process only
        from olmocr_rl.telemetry.wandb_run import wandb_credentials_problem

        os.environ.setdefault("WANDB_PROJECT", cfg.wandb_project)  # before W&B reads its settings
        problem = wandb_credentials_problem()
        if problem:
            raise _Stop(problem)
    if cfg.s3_save_path:  # OLMOCR_RL_S3_LEASE_SECONDS, read when the prefix is claimed: its one line now
        from olmocr_rl.storage import StorageError
        from olmocr_rl.storage.lease import lease_seconds

        try:
            lease_seconds()
        except StorageError as exc:
            raise _Stop(str(exc), code=status.BAD_FLAGS) from None
    from olmocr_rl.data.validation import validate_bench_folder

    folders = {cfg.train_bench_data_folder}
    if cfg.eval_steps is not None and cfg.eval_bench_data_folder:
        folders.add(cfg.eval_bench_data_folder)
    reports = {}  # each folder read once: the datasets are built from validation's report
    for folder in sorted(folders):
        report = reports[folder] = validate_bench_folder(folder, jsonl_filter=cfg.jsonl_filter,
                                                         test_types=_test_types(cfg))
        if not report.ok:
            print(report.format(), file=sys.stderr)
            raise _Stop(f"bench folder {folder} has problems (listed above); fix them, or check them with "
                        f"`python -m olmocr_rl.validate_bench {folder}`")
    if cfg.vllm_mode == "server" and is_main_process():
        _check_server(cfg)
    _make_output_dir(cfg.output_dir)
    resume = _resume_checkpoint(cfg)
    if resume:
        from olmocr_rl.trainer.adapter_checkpoint import kind_mismatch

        problem = kind_mismatch(resume, cfg.use_peft)  # a LoRA checkpoint for a full fine-tune, or the reverse
        if problem:
            raise _Stop(f"--resume_from_checkpoint: {problem}")
        _compare_flags(cfg, resume)
    if cfg.s3_save_path:  # a mistyped bucket or missing credentials now, not as log lines at the first save
        from olmocr_rl.storage import StorageError, check_s3_access

        try:
            check_s3_access(cfg.s3_save_path)
        except StorageError as exc:
            raise _Stop(f"--s3_save_path: {exc}") from None
    return resume, reports


def _check_server(cfg: ResolvedConfig) -> None:
    """--vllm_mode server: a server listens at --vllm_server_host:--vllm_server_port (else TRL would wait minutes for
    it after the model loaded) and, without CUDA, takes the gloo weight push; _Stop in one line otherwise."""
    from olmocr_rl.config.environment import server_not_listening

    host, port = cfg.vllm_server_host, cfg.vllm_server_port
    why = server_not_listening(host, port)
    if why:
        import shlex

        from olmocr_rl.trainer.gloo_push import server_flags

        gloo = "" if cuda_available() else " " + shlex.join(server_flags())
        raise _Stop(f"--vllm_server_host/--vllm_server_port: no vLLM server at http://{host}:{port} ({why}): start "
                    f"it first (`trl vllm-serve --model {cfg.model_name} --host {host} --port {port}{gloo}`, on GPUs "
                    "of its own; scripts/slurm/grpo.sbatch and scripts/grpotrainer-beaker.sh start it and wait for "
                    "it), or check the host and port")
    if not cuda_available():  # weights go over gloo
        from olmocr_rl.trainer.gloo_push import server_problem

        problem = server_problem(host, port)
        if problem:
            raise _Stop(f"--vllm_server_host/--vllm_server_port: {problem}")


def _make_output_dir(output_dir: str) -> None:
    """--output_dir made (with its parents), or _Stop in one line: a file there or above it, a disk it cannot be
    made on (read-only, not this user's)."""
    try:
        os.makedirs(output_dir, exist_ok=True)
        return
    except OSError as exc:
        error = exc
    from olmocr_rl.storage import describe_write_failure

    path = Path(output_dir)
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker == path:
        raise _Stop(f"--output_dir {output_dir} is a file, not a folder: choose a folder (or move the file away)")
    if blocker is not None:
        raise _Stop(f"--output_dir {output_dir}: {blocker} is a file, so no folder can be made under it: choose "
                    "another --output_dir")
    reason = describe_write_failure(error, path, None) or error.strerror or str(error)
    raise _Stop(f"--output_dir {output_dir}: cannot create it ({reason}); choose a folder this run can write in")


def _compare_flags(cfg: ResolvedConfig, resume: str) -> None:
    """Each flag that differs from the checkpoint's in one line (applied, or kept and why); _Stop for one that
    changes what is trained (config.resume_flags)."""
    from olmocr_rl.config.resume_flags import compare_with_checkpoint
    from olmocr_rl.storage.checkpoints import checkpoint_step

    lines, refusal = compare_with_checkpoint(cfg.flags, resume, checkpoint_step(Path(resume).name))
    if refusal:
        raise _Stop(f"--resume_from_checkpoint: {resume}: {refusal}")
    for line in lines if is_main_process() else ():
        logger.warning("resuming with %s", line)


def _test_types(cfg: ResolvedConfig) -> list[str] | None:
    return list(cfg.bench_type_filter) if cfg.bench_type_filter else None


def _build_datasets(cfg: ResolvedConfig, reports: dict):
    """``(train, eval or None)``, before the model: a page filter that leaves no page fails fast."""
    from olmocr_rl.data.dataset import BenchDataError, OlmOCRBenchDataset, PageFilterError

    common = dict(target_longest_image_dim=cfg.target_longest_image_dim, jsonl_filter=cfg.jsonl_filter,
                  test_types=_test_types(cfg), pages=cfg.pages, exclude_pages=cfg.exclude_pages)
    try:  # validate_bench checked the files; what can still fail is a page filter that leaves no page
        train_dataset = OlmOCRBenchDataset(cfg.train_bench_data_folder, max_samples=cfg.max_train_samples,
                                           report=reports[cfg.train_bench_data_folder], **common)
        eval_dataset = None
        if cfg.eval_steps is not None:
            eval_folder = cfg.eval_bench_data_folder or cfg.train_bench_data_folder
            eval_dataset = OlmOCRBenchDataset(eval_folder, max_samples=cfg.max_eval_samples,
                                              report=reports[eval_folder], **common)
    except PageFilterError as exc:  # where each filter was set: a config file's line, or the command line
        raise _Stop(exc.explain({name: cfg.config if name in cfg.from_config_file else "command line"
                                 for name in ("pages", "exclude_pages")})) from None
    except BenchDataError as exc:
        raise _Stop(str(exc)) from None  # _fail joins its lines into one
    logger.info("train pages:\n%s", train_dataset.describe())
    return train_dataset, eval_dataset


def _check_trainer_setup(cfg: ResolvedConfig):
    """Before the model loads: a supported family and the MoE router loss (from the config); the LoRA plan (on the architecture); the colocated engine fits the GPU; TRL's
    private surface is the one the trainers rely on (olmocr_rl.trainer.compat: a mismatch is one line naming the
    point and the pin); the gradient checkpointing plan (olmocr_rl.model.grad_checkpointing: from the architecture and
    the GPU's memory); TRL's GRPOConfig, built here so that its own checks refuse a setting now, not minutes in.
    Returns ``(GRPOConfig, LoRA config or None, CheckpointPlan)``."""
    from olmocr_rl.config.checks import max_image_tokens
    from olmocr_rl.config.flags import PROMPT_TEXT_TOKENS
    from olmocr_rl.model.grad_checkpointing import plan_for_run
    from olmocr_rl.model.loading import router_aux_loss_problem, unsupported_model_problem

    problem = unsupported_model_problem(cfg.model_name, cfg.cache_dir) or \
        router_aux_loss_problem(cfg.model_name, cfg.router_aux_loss_coef, cfg.cache_dir)
    if problem:  # from the config alone: TRL would refuse it only once the weights are in memory
        raise _Stop(problem)
    peft_config = _adapter_config(cfg)
    if cfg.vllm_mode == "colocate":
        from olmocr_rl.model.colocate_memory import colocate_memory_problem

        problem = colocate_memory_problem(cfg)
        if problem:
            raise _Stop(problem)
    from olmocr_rl.trainer.compat import CompatError, require_surface

    try:
        require_surface(vllm=cfg.vllm_mode != "none")
    except CompatError as exc:
        raise _Stop(str(exc)) from None
    checkpointing = plan_for_run(cfg, image_tokens=max_image_tokens(cfg.target_longest_image_dim),
                                 text_tokens=PROMPT_TEXT_TOKENS)
    try:
        return build_grpo_config(cfg, gradient_checkpointing=checkpointing.mode == "full"), peft_config, checkpointing
    except ValueError as exc:  # TRL's own checks of what no check of ours covers
        raise _Stop(f"TRL's GRPOConfig refuses these settings: {exc}", code=status.BAD_FLAGS) from None


def _load_model(cfg: ResolvedConfig):
    """``(model, processor)``: the weights, then the frozen vision parts and the vision speedups."""
    from olmocr_rl.model.loading import ModelLoadError, load_model_and_processor
    from olmocr_rl.model.vision_speedups import apply_vision_speedups

    try:
        model, processor = load_model_and_processor(cfg.model_name, cache_dir=cfg.cache_dir)
    except ModelLoadError as exc:
        raise _Stop(f"--model_name: {exc}") from None
    except OSError as exc:  # hub id not reachable offline, missing files
        raise _Stop(f"cannot load --model_name {cfg.model_name}: {exc}") from None
    if cfg.freeze_vision_tower or cfg.freeze_vision_merger:
        from olmocr_rl.model.frozen_vision import freeze_vision

        frozen = freeze_vision(model, tower=cfg.freeze_vision_tower, merger=cfg.freeze_vision_merger)
        logger.info("vision tower: %s frozen (%.2fM parameters without gradients)", " and ".join(
            part for part, on in (("tower", cfg.freeze_vision_tower), ("merger", cfg.freeze_vision_merger)) if on),
            frozen / 1e6)
    for speedup in apply_vision_speedups(model, share_pages=cfg.share_page_encoding,
                                         batched_attention=cfg.batched_vision_attention):
        logger.info("vision tower: %s", speedup)
    if cfg.share_page_processing:
        from olmocr_rl.model.page_processing import share_page_processing

        if share_page_processing(processor) is not None:
            logger.info("processor: each distinct page image processed once per step")
    return model, processor


def _adapter_config(cfg: ResolvedConfig):
    """The ``peft.LoraConfig`` of ``--use_peft`` (None without), checked on the model's architecture."""
    if not cfg.use_peft:
        return None
    from olmocr_rl.model.adapters import AdapterError, plan_for_run
    from olmocr_rl.model.loading import ModelLoadError, resolve_model_path

    try:
        plan = plan_for_run(cfg, resolve_model_path(cfg.model_name, cache_dir=cfg.cache_dir))
    except AdapterError as exc:
        raise _Stop(str(exc), code=status.BAD_FLAGS) from None
    except ModelLoadError as exc:
        raise _Stop(f"--model_name: {exc}") from None
    except (OSError, ValueError) as exc:
        raise _Stop(f"cannot load --model_name {cfg.model_name}: {exc}") from None
    logger.info("LoRA: adapters on %d layers of the language model, %.2fM adapter parameters%s", plan.adapted_layers,
                plan.adapter_parameters / 1e6,
                f" + {plan.saved_parameters / 1e6:.2f}M trained in full" if plan.saved_parameters else "")
    return plan.lora_config


def _build_rewards(cfg: ResolvedConfig, processor):
    """``(reward_funcs, reward_weights, reward_names, reward_logger)`` from the resolved reward spec."""
    from olmocr_rl.rewards import build_reward_functions
    from olmocr_rl.telemetry.pass_rates import DetailedRewardLogger

    reward_logger = DetailedRewardLogger()
    try:
        funcs, weights, names = build_reward_functions(
            cfg.rewards, eos_token_id=processor.tokenizer.eos_token_id,
            raw_completion=cfg.bench_raw_completion, reward_logger=reward_logger,
        )
    except ValueError as exc:
        raise _Stop(str(exc), code=status.BAD_FLAGS) from None
    logger.info("rewards: %s", ", ".join(f"{n} x {w:g}" for n, w in zip(names, weights)))
    return funcs, weights, names, reward_logger


def _stop_reward_workers(reward_funcs) -> None:
    """Stop the bench rewards' worker pools when the run ends, however it ends: a process that called ``main`` (a
    launcher's child, gpu_check's per-arm process) would otherwise wait at its exit for workers that wait for work."""
    for func in reward_funcs:
        scorer = getattr(func, "scorer", None)
        if scorer is not None:
            scorer.close(wait=True)  # ended here: nothing of the pool left to the interpreter's exit


def _build_trainer(cfg: ResolvedConfig, grpo_config, model, processor, rewards, train_dataset, eval_dataset, resume,
                   peft_config=None, checkpointing=None):
    """Plain TRL GRPO or OlmoRL (olmocr_rl.trainer.build), with the gradient checkpointing plan installed on the
    model (olmocr_rl.model.grad_checkpointing) and W&B started first when asked for."""
    from olmocr_rl.config.grpo import ban_vision_pad_tokens
    from olmocr_rl.model.grad_checkpointing import apply_checkpointing
    from olmocr_rl.telemetry.console import filter_startup_noise
    from olmocr_rl.trainer.build import build_trainer

    filter_startup_noise()  # before the Trainer logs its start-up messages (the fail-fast paths never import it)

    reward_funcs, _, reward_names, reward_logger = rewards  # the weights are in grpo_config (both from cfg.rewards)
    ban_vision_pad_tokens(grpo_config, cfg, processor.tokenizer)
    if checkpointing is not None:
        installed = apply_checkpointing(model, checkpointing)
        logger.info("gradient checkpointing %s (%s)%s", checkpointing.mode, checkpointing.reason,
                    f": {installed} recompute" if installed else "")
    if "wandb" in cfg.report_to:
        from olmocr_rl.telemetry.wandb_run import init_wandb

        problem = init_wandb(cfg, resume)
        if problem:
            raise _Stop(problem)
    return build_trainer(cfg, grpo_config, model, processor, reward_funcs, reward_names, reward_logger,
                         train_dataset, eval_dataset, peft_config=peft_config)


def _train_and_save(cfg: ResolvedConfig, trainer, processor, resume: str | None) -> int:
    """Train (resumed from ``resume``), save the model and processor, write the summary and mirror; the exit status.

    A stop signal (trainer.preemption) ends training after a checkpoint of its step: no final model, and the
    exit status says "preempted". A page that cannot be rendered any more (its PDF gone) stops the run with
    one line, after saving the steps done so far (one process: several cannot join a save from here)."""
    from olmocr_rl.data.render import RenderError
    from olmocr_rl.storage import CheckpointMismatchError, StorageError
    from olmocr_rl.trainer.build import preemption_of
    from olmocr_rl.trainer.compat import CompatError
    from olmocr_rl.trainer.preemption import finish_lease_lost, finish_preempted, lease_lost_everywhere, save_after_failure

    try:
        trainer.train(resume_from_checkpoint=resume)
    except CheckpointMismatchError as exc:  # the checkpoint's weights do not fit --model_name's architecture
        raise _Stop(f"--resume_from_checkpoint: {exc}") from None
    except CompatError as exc:  # a private point that only the data could show broken (trainer/compat.py)
        raise _Stop(str(exc)) from None
    except StorageError as exc:  # a save the disk refused (trainer.checkpoint_save): one line
        raise _Stop(str(exc)) from None
    except RenderError as exc:
        raise _Stop(f"{exc}; {save_after_failure(trainer)}") from None
    request = preemption_of(trainer).request
    lost = lease_lost_everywhere(trainer, request) if cfg.s3_save_path else None
    if lost:  # another run holds the prefix now: nothing more goes there, no final model (storage.lease)
        return _fail(*reversed(finish_lease_lost(trainer, lost, cfg.s3_save_path, status.LEASE_LOST)))
    if request.agreed_step is not None and trainer.state.global_step < trainer.state.max_steps:
        return finish_preempted(trainer, request, cfg.s3_save_path, cfg.preempt_upload_timeout, status.PREEMPTED)
    from olmocr_rl.trainer.final_model import FinalSaveError, save_final

    try:
        save_final(cfg, trainer, processor)
    except FinalSaveError as exc:  # the disk refused it: sizes and free space, and how the requeue finishes it
        raise _Stop(str(exc)) from None
    return _finish(trainer, cfg)


def _resume_checkpoint(cfg: ResolvedConfig) -> str | None:
    """The checkpoint to resume from (pulled from S3 on a fresh machine), after the checks a run's start needs
    (storage.resume.prepare_start): _Done when it already ends the run (its final model written from it first when
    that was missing), _Stop for a start that cannot go on."""
    from olmocr_rl.storage.resume import AlreadyFinished, FinalModelMissing, StartError, prepare_start

    try:
        return prepare_start(cfg.resume_from_checkpoint, cfg.output_dir, cfg.s3_save_path, max_steps=cfg.max_steps,
                             num_train_epochs=cfg.num_train_epochs, allow_partial_resume=cfg.allow_partial_resume,
                             overwrite_output_dir=cfg.overwrite_output_dir)
    except AlreadyFinished as done:
        raise _Done(_complete_finished_mirror(cfg, done.head, str(done))) from None
    except FinalModelMissing as missing:
        raise _Done(_write_final(cfg, missing)) from None
    except StartError as exc:
        raise _Stop(str(exc)) from None


def _write_final(cfg: ResolvedConfig, missing) -> str:
    """A run at its last step without a whole final model: written from that checkpoint (global main process), then
    mirrored like a finished run's; the line to log."""
    from olmocr_rl.trainer.final_model import FinalSaveError, write_from_checkpoint

    line = f"{missing.head}: its final model was missing, written from {missing.checkpoint}"
    if is_main_process():
        logger.warning("%s: writing it from %s", missing, missing.checkpoint)
        try:
            written = write_from_checkpoint(cfg, missing.checkpoint, missing.step)
        except FinalSaveError as exc:
            raise _Stop(str(exc)) from None
        line += f" ({len(written)} files)"
    return _complete_finished_mirror(cfg, missing.head, line, written_now=True)


def _complete_finished_mirror(cfg: ResolvedConfig, head: str, line: str, written_now: bool = False) -> str:
    """A finished run requeued (e.g. after exit 74): what S3 still lacks of this disk goes up first (each machine's
    local main process); the line to log, or _Stop with status 74 when S3 still refuses it."""
    from olmocr_rl.ranks import is_local_main_process

    if not cfg.s3_save_path or not is_local_main_process():
        return line
    from olmocr_rl.storage import StorageError
    from olmocr_rl.storage.lease import LeaseHeldError, LeaseUnreadableError, acquire_lease
    from olmocr_rl.storage.resume import complete_mirror

    if is_main_process():  # another live run on the prefix: do not upload into it (storage.lease)
        try:
            acquire_lease(cfg.s3_save_path)
        except (LeaseHeldError, LeaseUnreadableError) as exc:
            raise _Stop(f"--s3_save_path {exc}") from None
        except StorageError:
            pass  # S3 down: the mirror below says so (status 74)
    try:
        result = complete_mirror(cfg.output_dir, cfg.s3_save_path)
    except StorageError as exc:
        raise _Stop(f"{head}, but completing its mirror to {cfg.s3_save_path} failed: {exc}; "
                    f"rerun when S3 is back, or copy {cfg.output_dir} there (`aws s3 sync {cfg.output_dir} "
                    f"{cfg.s3_save_path}`) before this disk goes", status.UNSYNCED) from None
    if not result.uploaded:
        return line
    if written_now:
        return f"{line}; mirrored to {cfg.s3_save_path}: {result.summary()}"
    return f"{head}: nothing to train; completed its mirror to {cfg.s3_save_path}: {result.summary()}"


def _finish(trainer, cfg: ResolvedConfig) -> int:
    """The run summary, the final mirror and the last log line; the exit status (74 when the mirror failed)."""
    from olmocr_rl.trainer.final_model import write_summary

    if is_main_process(trainer.state):
        write_summary(cfg.output_dir, trainer.state.global_step)
    # on_train_end fired before the final save; mirror the final model (and the summary) too: every node's
    # own files. A mirror that still fails after its retries is the run's failure: the machine's disk may not
    # outlive the job.
    from olmocr_rl.trainer.preemption import uploads

    failed, cut = [], False
    for callback in uploads(trainer):
        callback.sync(wait=False)
        cut = not callback.wait() or cut  # False only past a stop signal's deadline
        if callback.last_error or cut or callback.halted:
            failed.append(callback)
    if is_main_process(trainer.state):
        logger.info("done: %d steps, model and processor saved in %s", trainer.state.global_step, cfg.output_dir)
        if "wandb" in cfg.report_to:
            import wandb

            if wandb.run is not None:
                wandb.finish()
    for callback in failed:
        only = callback.only_local()
        if callback.halted:  # the lease was lost during the final mirror (storage.lease)
            return _fail(f"{callback.halted}: this run wrote nothing more to {cfg.s3_save_path}; only in "
                         f"{cfg.output_dir}: {_tops(only)} ({len(only)} files), the final model included: leave the "
                         "prefix to that run if it is live, else rerun with --resume_from_checkpoint once its lease "
                         "is gone, which completes the mirror", status.LEASE_LOST)
        why = ("was cut short by a stop signal (--preempt_upload_timeout)" if cut else
               f"failed after its retries ({callback.last_error})")
        code = _fail(f"the final mirror of {cfg.output_dir} to {cfg.s3_save_path} {why}; only on local disk: "
                     f"{_tops(only)} ({len(only)} files): copy them (e.g. `aws s3 sync {cfg.output_dir} "
                     f"{cfg.s3_save_path}`) before this disk goes", status.UNSYNCED)
        if cut:  # the upload thread would hold the process past the deadline
            from olmocr_rl.storage.lease import release_held

            callback.halt("the stop signal's upload deadline passed")  # nothing new starts while the lease goes
            release_held()  # os._exit skips main's release: the next start must not find it live
            logging.shutdown()
            sys.stderr.flush()
            os._exit(code)
        return code
    return status.OK


def _tops(rels: list[str]) -> str:
    """``model.safetensors, ..., checkpoint-8/``: the top-level entries of relative paths, files first."""
    tops = sorted({rel.split("/")[0] + ("/" if "/" in rel else "") for rel in rels},
                  key=lambda top: (top.endswith("/"), top))
    return ", ".join(tops[:16]) + (f" and {len(tops) - 16} more" if len(tops) > 16 else "")


if __name__ == "__main__":
    sys.exit(cli())
