"""The whole CPU recipe in one command, stage by stage, resumable: ``bash scripts/recipe_cpu.sh`` runs it.

    python -m olmocr_rl.recipe --out outputs/recipe                 # everything (about an hour on 2 cores)
    python -m olmocr_rl.recipe --out outputs/recipe --until sft     # the data and the warm start only
    python -m olmocr_rl.recipe --out outputs/recipe --list          # the stages and which are done

Each stage is one of the project's own commands, run as a user would run it (its output is this command's
output), in this order: generate the train and held-out pages -> synth both -> the teacher's transcripts of the
train pages -> the GRPO bench (the train tests, with references cut to their front matter: GRPO never sees a
clean transcription) -> build the reading model -> warm start (SFT) -> evaluate it on the held-out pages -> per
arm (plain GRPO and ``--olmorl``, each over the seeds, and the sign-flipped control) GRPO, evaluate, compare with
the warm start -> the uniform soup of each algorithm's seeds, evaluated and compared -> ``report.md`` with its
plots. A stage whose outputs are complete (``recipe_state.json`` records it) is not run again; a stage that was
stopped runs again (GRPO and evaluation continue from what they kept; the others start over). A stage whose
settings changed since it ran (its command's flags or environment, e.g. another ``--page_steps``) starts over, and
so does every stage after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .sft import Schedule

__all__ = ["Plan", "Stage", "stages", "main"]

STATE = "recipe_state.json"


@dataclass(frozen=True)
class Plan:
    """What the recipe does (docs/recipe.md explains each number)."""

    out: str = "outputs/recipe"
    train_pages: int = 1000  # generated pages to train on (SFT and GRPO); 300 read three times worse held out
    heldout_pages: int = 200  # generated pages never trained on: every reported number is measured on them (60
    # gave intervals about twice as wide)
    page_seed: int = 0
    seeds: tuple[int, ...] = (0, 1, 2)  # GRPO seeds per algorithm
    algorithms: tuple[str, ...] = ("plain", "olmorl")
    control: bool = True  # a plain GRPO run with the bench reward's sign flipped (seed of the first seed)
    line_steps: int = Schedule.line_steps  # warm start, stage 1 (python -m olmocr_rl.recipe.sft)
    page_steps: int = Schedule.page_steps  # warm start, stage 2
    sft_threads: int = 0  # the warm start's threads (0: one a core); every other stage runs with OMP_NUM_THREADS
    grpo_config: str = "configs/recipe-cpu.yaml"  # the GRPO runs' flags (python -m olmocr_rl.grpo_train)
    grpo_steps: int | None = None  # override the config's max_steps
    eval_samples: int = 1  # transcriptions per held-out page (K > 1: a test passes when most of the K pass it)
    eval_temperature: float = 0.0  # greedy: the warm start's samples at GRPO's temperature read far worse
    eval_max_new_tokens: int = 384
    eval_batch_size: int = 16
    image_dim: int = Schedule.image_dim  # the pages' longest side everywhere (grid, warm start, GRPO, evaluation)
    bootstrap: int = 1000  # paired bootstrap resamples over pages for --compare
    extra_grpo_flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def arms(self) -> list[tuple[str, list[str]]]:
        """(name, extra grpo_train flags) of each GRPO run."""
        arms = []
        for algorithm in self.algorithms:
            for seed in self.seeds:
                # OlmoRL has no KL term: the config's beta is set back to 0 for it
                flags = ["--seed", str(seed)] + (["--olmorl", "--beta", "0"] if algorithm == "olmorl" else [])
                arms.append((f"{algorithm}-s{seed}", flags))
        if self.control:
            arms.append((f"flipped-s{self.seeds[0]}", ["--seed", str(self.seeds[0]), "--reward_bench", "-1"]))
        return arms


@dataclass
class Stage:
    """One step of the recipe: a command (argv, or a function of the plan) and the paths it leaves."""

    name: str
    outputs: list[Path]
    command: list[str] | None = None
    function: Callable[[], None] | None = None
    stdout: Path | None = None  # the command's standard output goes to this file (a --json result)
    fresh: bool = True  # a stopped stage starts over (its outputs removed) rather than continuing
    env: dict[str, str] = field(default_factory=dict)  # set in the command's environment


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def stages(plan: Plan) -> list[Stage]:
    """Every stage of ``plan``, in order."""
    out = Path(plan.out)
    pages, bench, models, runs, evals, compare = (out / p for p in ("pages", "bench", "models", "runs", "eval",
                                                                    "compare"))
    result: list[Stage] = []
    for split, n in (("train", plan.train_pages), ("heldout", plan.heldout_pages)):
        result.append(Stage(f"pages-{split}", [pages / split], _python(
            "olmocr_rl.recipe.pages", "--split", split, "--n", str(n), "--seed", str(plan.page_seed),
            "--dim", str(plan.image_dim), "--out", str(pages / split))))
    for split in ("train", "heldout"):
        result.append(Stage(f"synth-{split}", [bench / split], _python(
            "olmocr_rl.synth", "--html", str(pages / split), "--out", str(bench / split))))
    result.append(Stage("teacher", [out / "teacher"], _python(
        "olmocr_rl.recipe.teacher", "--bench", str(bench / "train"), "--pages", str(pages / "train"),
        "--out", str(out / "teacher"), "--seed", str(plan.page_seed))))
    result.append(Stage("grpo-bench", [bench / "train-rl"],
                        function=lambda: tests_only_bench(bench / "train", bench / "train-rl")))
    result.append(Stage("model", [models / "base"], _python(
        "olmocr_rl.tiny_model", str(models / "base"), "--shape", "reader", "--tokenizer", "chars",
        "--seed", str(plan.page_seed))))
    result.append(Stage("sft", [models / "sft"], _python(
        "olmocr_rl.recipe.sft", str(models / "base"), "--bench", str(bench / "train"), "--transcripts",
        str(out / "teacher"), "--out", str(models / "sft"), "--line_steps", str(plan.line_steps),
        "--page_steps", str(plan.page_steps), "--image_dim", str(plan.image_dim), "--seed", str(plan.page_seed)),
        env={"OMP_NUM_THREADS": str(plan.sft_threads or cores())}))
    result.append(_evaluate(plan, "sft", models / "sft", bench / "heldout", evals))
    for name, flags in plan.arms:
        steps = ["--max_steps", str(plan.grpo_steps)] if plan.grpo_steps else []
        result.append(Stage(f"grpo-{name}", [runs / name / "model.safetensors"], _python(
            "olmocr_rl.grpo_train", "--config", plan.grpo_config, "--model_name", str(models / "sft"),
            "--train_bench_data_folder", str(bench / "train-rl"), "--output_dir", str(runs / name),
            "--target_longest_image_dim", str(plan.image_dim), *flags, *steps, *plan.extra_grpo_flags), fresh=False))
        result.append(_evaluate(plan, name, runs / name, bench / "heldout", evals))
        result.append(_compare(plan, name, evals, compare))
    for algorithm in plan.algorithms:
        if len(plan.seeds) < 2:
            continue
        soup = f"soup-{algorithm}"
        result.append(Stage(soup, [models / soup / "model.safetensors"], _python(
            "olmocr_rl.soup", *(str(runs / f"{algorithm}-s{seed}") for seed in plan.seeds), str(models / soup),
            "--overwrite")))
        result.append(_evaluate(plan, soup, models / soup, bench / "heldout", evals))
        result.append(_compare(plan, soup, evals, compare))
    from .report import write_report

    result.append(Stage("report", [out / "report.md"], function=lambda: write_report(plan)))
    return result


def _evaluate(plan: Plan, name: str, model: Path, bench: Path, evals: Path) -> Stage:
    return Stage(f"eval-{name}", [evals / f"{name}.json"], _python(
        "olmocr_rl.evaluate", "--model", str(model), "--bench", str(bench), "--outputs", str(evals / name),
        "--num_samples", str(plan.eval_samples), "--temperature", str(plan.eval_temperature),
        "--max_new_tokens", str(plan.eval_max_new_tokens), "--batch_size", str(plan.eval_batch_size),
        "--bootstrap", str(plan.bootstrap), "--target_longest_image_dim", str(plan.image_dim), "--json"),
        stdout=evals / f"{name}.json", fresh=False)


def _compare(plan: Plan, name: str, evals: Path, compare: Path) -> Stage:
    return Stage(f"compare-{name}", [compare / f"{name}.json"], _python(
        "olmocr_rl.evaluate", "--compare", str(evals / "sft"), str(evals / name), "--bootstrap", str(plan.bootstrap),
        "--json"), stdout=compare / f"{name}.json")


def tests_only_bench(bench: Path, out: Path) -> None:
    """``bench``'s tests and PDFs, with each reference cut to its front matter: what the GRPO runs train on.

    olmOCR 2's rewards are the unit tests, the front matter (compared with the reference's) and EOS; none needs
    the reference's text, so GRPO never sees a clean transcription of a page.
    """
    from olmocr_rl.data.front_matter import parse_page_response, format_front_matter
    from olmocr_rl.data.references import REFERENCE_FOLDER

    from dataclasses import replace

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for jsonl in sorted(bench.glob("*.jsonl")):
        shutil.copy2(jsonl, out / jsonl.name)
    os.symlink((bench / "pdfs").resolve(), out / "pdfs", target_is_directory=True)
    for reference in sorted((bench / REFERENCE_FOLDER).rglob("*.md")):
        front = format_front_matter(replace(parse_page_response(reference.read_text(encoding="utf-8")),
                                            natural_text=None))
        target = out / reference.relative_to(bench)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(front + "\n", encoding="utf-8")


def _load_state(out: Path) -> dict:
    path = out / STATE
    return json.loads(path.read_text()) if path.is_file() else {"stages": {}}


def _save_state(out: Path, state: dict) -> None:
    path = out / STATE
    path.write_text(json.dumps(state, indent=2) + "\n")


def settings(stage: Stage) -> list | None:
    """What a stage runs, as recorded in the state: its command's arguments and environment (None: a function)."""
    return None if stage.command is None else [stage.command[1:], stage.env]


def changed(stage: Stage, state: dict) -> bool:
    """The stage was started before with other settings (a changed flag of this command, a changed default)."""
    recorded = state["stages"].get(stage.name, {})
    return "settings" in recorded and recorded["settings"] != settings(stage)


def is_done(stage: Stage, state: dict) -> bool:
    """A stage is done when it finished (recorded), with these settings, and its outputs are all still there."""
    return (bool(state["stages"].get(stage.name, {}).get("done")) and not changed(stage, state)
            and all(p.exists() for p in stage.outputs))


def run(plan: Plan, until: str | None = None, log=print) -> int:
    out = Path(plan.out)
    out.mkdir(parents=True, exist_ok=True)
    state = _load_state(out)
    state["plan"] = asdict(plan)
    all_stages = stages(plan)
    names = [s.name for s in all_stages]
    if until is not None and until not in names:
        log(f"error: --until {until}: no such stage; the stages are {', '.join(names)}")
        return 2
    first_changed = next((i for i, stage in enumerate(all_stages) if changed(stage, state)), None)
    if first_changed is not None:  # later stages may read its outputs: they start over too, now and after a stop
        log(f"[recipe] {all_stages[first_changed].name} ran before with other settings: it and every later stage "
            "start over")
        for stage in all_stages[first_changed:]:
            state["stages"].pop(stage.name, None)
            _remove(stage.outputs)
        _save_state(out, state)
    started = time.time()
    for index, stage in enumerate(all_stages, 1):
        if is_done(stage, state):
            log(f"[recipe] {index}/{len(all_stages)} {stage.name}: done before "
                f"({state['stages'][stage.name]['seconds']:.0f} s), kept")
        else:
            log(f"[recipe] {index}/{len(all_stages)} {stage.name} ({time.time() - started:.0f} s into this run)")
            state["stages"][stage.name] = {"done": False, "settings": settings(stage)}  # a stop keeps what it ran
            _save_state(out, state)
            if stage.fresh:
                _remove(stage.outputs)
            begun = time.time()
            status = _execute(stage)
            if status != 0:
                log(f"error: the recipe's stage {stage.name} failed (exit status {status}); fix what it printed "
                    f"above and run the same command again: finished stages are kept")
                return status
            missing = [str(p) for p in stage.outputs if not p.exists()]
            if missing:
                log(f"error: the recipe's stage {stage.name} ended without writing {', '.join(missing)}")
                return 1
            state["stages"][stage.name] = {"done": True, "seconds": round(time.time() - begun, 1),
                                           "settings": settings(stage)}
            _save_state(out, state)
        if stage.name == until:
            break
    total = sum(s.get("seconds", 0) for s in state["stages"].values())
    log(f"[recipe] finished: {out} ({total / 60:.1f} min of stages in all; report: {out / 'report.md'})")
    return 0


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def _execute(stage: Stage) -> int:
    if stage.function is not None:
        stage.function()
        return 0
    env = {**os.environ, **stage.env}
    if stage.stdout is None:
        return subprocess.run(stage.command, env=env).returncode
    stage.stdout.parent.mkdir(parents=True, exist_ok=True)
    partial = stage.stdout.with_name(stage.stdout.name + ".partial")
    with partial.open("w") as sink:
        status = subprocess.run(stage.command, stdout=sink, env=env).returncode
    if status == 0:
        partial.replace(stage.stdout)
    return status


def main(argv: list[str] | None = None) -> int:
    defaults = Plan()
    parser = argparse.ArgumentParser(prog="python -m olmocr_rl.recipe", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--out", default=defaults.out, help=f"the recipe's folder (default {defaults.out})")
    parser.add_argument("--until", metavar="STAGE", help="stop after this stage (--list names them)")
    parser.add_argument("--list", action="store_true", help="list the stages, marking those done, and exit")
    for name in ("train_pages", "heldout_pages", "line_steps", "page_steps", "eval_samples", "page_seed"):
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name),
                            help=f"default {getattr(defaults, name)}")
    parser.add_argument("--sft_threads", type=int, default=defaults.sft_threads,
                        help="the warm start's threads (default 0: one a core, the fastest on an otherwise idle "
                             "machine; on a shared one give 1). Every other stage runs with OMP_NUM_THREADS, which "
                             "scripts/recipe_cpu.sh sets to 1")
    parser.add_argument("--eval_temperature", type=float, default=defaults.eval_temperature,
                        help=f"held-out transcriptions' temperature (default {defaults.eval_temperature}: greedy; "
                             "above 0 give --eval_samples K > 1)")
    parser.add_argument("--grpo_steps", type=int, default=None, help="override the GRPO config's max_steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(defaults.seeds),
                        help=f"GRPO seeds per algorithm (default {' '.join(map(str, defaults.seeds))})")
    parser.add_argument("--algorithms", nargs="+", choices=("plain", "olmorl"), default=list(defaults.algorithms),
                        help="GRPO algorithms (default: both)")
    parser.add_argument("--no_control", action="store_true", help="skip the sign-flipped control run")
    parser.add_argument("--grpo_config", default=defaults.grpo_config,
                        help=f"the GRPO runs' config (default {defaults.grpo_config})")
    args = parser.parse_args(argv)
    if args.sft_threads < 0:
        parser.error(f"--sft_threads {args.sft_threads}: give a number of threads, or 0 for one a core")
    if not Path(args.grpo_config).is_file():
        parser.error(f"--grpo_config {args.grpo_config} does not exist (run from the repository's root, or give "
                     "its path)")
    plan = Plan(out=args.out, train_pages=args.train_pages, heldout_pages=args.heldout_pages,
                page_seed=args.page_seed, seeds=tuple(args.seeds), algorithms=tuple(args.algorithms),
                control=not args.no_control, line_steps=args.line_steps, page_steps=args.page_steps,
                sft_threads=args.sft_threads,
                grpo_config=args.grpo_config, grpo_steps=args.grpo_steps, eval_samples=args.eval_samples,
                eval_temperature=args.eval_temperature)
    if args.list:
        state = _load_state(Path(plan.out))
        for stage in stages(plan):
            print(f"{'done' if is_done(stage, state) else '    '}  {stage.name}")
        return 0
    return run(plan, args.until)
