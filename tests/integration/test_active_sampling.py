"""OlmoRL active sampling (``--active_sampling``) on the tiny model.

Eight pages, four of them "flat" (every completion gets reward 0.5, so the group carries no signal) and
four where the two completions of a group always differ. One generation batch holds four groups. With
active sampling every generation batch must train on four groups with signal, refilled from pages the
trainer's own sampler draws, seeded by (seed, step, round), while the epoch's pages stay the Trainer's; without
it, half of the epoch's groups are dropped. The loss of every optimizer step must be
``-olmorl_objective`` over the kept groups of the (refilled) generation batch, computed here by hand from
the raw rewards (on one process and on two gloo processes), and a run resumed from a checkpoint must see
the same pages in the same order as an uninterrupted one.

Run directly (``torchrun --nproc_per_node 2 tests/integration/test_active_sampling.py MODEL_DIR OUT_DIR``), this file is
the worker of the 2-process test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_olmorl_trainer import TracingTrainer, _page_image, _pad_cat  # noqa: E402

from olmocr_rl.olmorl import group_advantages, nonzero_signal_groups, olmorl_objective  # noqa: E402
from olmocr_rl.trainer.olmorl import olmorl_config_overrides

G = 2
PAGES = ["flat0", "alpha", "flat1", "beta", "flat2", "gamma", "flat3", "delta"]
GROUPS_PER_STEP = 4  # one generation batch: 4 pages x G=2 on 1 process, or 2 pages x G on each of 2


def _dataset(copies: int = 1):
    from datasets import Dataset

    prompt = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    pages = [f"{p}{'' if c == 0 else f'_{c}'}" for c in range(copies) for p in PAGES]
    return Dataset.from_list([{"prompt": prompt, "image": _page_image(p), "page": p} for p in pages])


def _reward(calls: list):
    def page_reward(completions, page, **kwargs):
        rewards = [0.5 if p.startswith("flat") else (i % 2) + (len(c[0]["content"]) % 7) / 10
                   for i, (c, p) in enumerate(zip(completions, page))]
        calls.append(list(zip(page, rewards)))
        return rewards
    return page_reward


class ActiveTracingTrainer(TracingTrainer):
    """Tags every row, before the refill merges rounds, with its raw reward and a global group id."""

    def __init__(self, *args, calls=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = calls
        self.rounds_seen = 0

    def _score_generation_batch(self, inputs):
        output, keep = super()._score_generation_batch(inputs)
        n = output["advantages"].shape[0]
        rank = self.accelerator.process_index
        output["trace_reward"] = torch.tensor([r for _, r in self.calls[-1]], dtype=torch.float64)
        output["trace_group"] = (self.rounds_seen * 1000 + rank * 100 + torch.arange(n) // G)
        self.rounds_seen += 1
        return output, keep

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.trace[-1].update(trace_reward=inputs["trace_reward"].cpu(), trace_group=inputs["trace_group"].cpu())
        return loss


def _train(model_dir: str, out_dir: str, per_device_batch: int, active: bool, max_steps: int = 4,
           save_steps: int | None = None, resume: str | None = None, num_iterations: int = 2, copies: int = 1):
    from trl import GRPOConfig

    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(model_dir)
    calls: list = []
    args = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=per_device_batch, gradient_accumulation_steps=2,
        num_generations=G, num_iterations=num_iterations, max_completion_length=6, max_steps=max_steps,
        learning_rate=0.05, report_to="none", use_cpu=True, bf16=False, logging_steps=1, seed=0,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        **olmorl_config_overrides(),
    )
    trainer = ActiveTracingTrainer(model=model, args=args, processing_class=processor, reward_funcs=_reward(calls),
                                   train_dataset=_dataset(copies), calls=calls, active_sampling=active)
    trainer.train(resume_from_checkpoint=resume)
    return {
        "calls": calls,
        "trace": [{k: v for k, v in r.items()} for r in trainer.trace_records()],
        "log_history": trainer.state.log_history,
        "rank": trainer.accelerator.process_index,
        "world_size": trainer.accelerator.num_processes,
    }


def _check_loss_is_the_objective_over_kept_groups(results: list[dict]) -> list[int]:
    """Per optimizer step, hand objective over the kept groups of the step's rows vs the trainer's loss.
    Returns the number of kept groups of each generation batch's first step."""
    n_proc = len(results)
    records = [rec for r in results for rec in r["trace"]]
    kept_per_generation = []
    for step in sorted({rec["step"] for rec in records}):
        recs = [rec for rec in records if rec["step"] == step]
        reward = torch.cat([rec["trace_reward"] for rec in recs])
        group = torch.cat([rec["trace_group"] for rec in recs])
        # regroup rows by id (the trainer shuffled them), then OlmoRL's plan by hand from the raw rewards
        order = torch.argsort(group, stable=True)
        assert all(int((group == g).sum()) == G for g in torch.unique(group)), "every group whole in its step"
        grouped_reward = reward[order]
        keep = torch.empty(len(group), dtype=torch.bool)
        adv = torch.empty(len(group), dtype=torch.float64)
        keep[order] = nonzero_signal_groups(grouped_reward, G).repeat_interleave(G)
        adv[order] = group_advantages(grouped_reward, G, normalize_std=False)

        logp_new = _pad_cat([rec["logps"] for rec in recs]).double().requires_grad_(True)
        logp_old = _pad_cat([rec["logps"] if rec["old"] is None else rec["old"] for rec in recs]).double()
        mask = _pad_cat([rec["mask"] for rec in recs])
        trainer_adv = torch.cat([rec["adv"] for rec in recs]).double()
        torch.testing.assert_close(trainer_adv, torch.where(keep, adv, 0.0), atol=1e-6, rtol=0)
        objective = olmorl_objective(logp_new, logp_old, adv, mask * keep[:, None])
        (-objective).backward()
        trainer_loss = sum(rec["loss"].double() for rec in recs) / n_proc
        assert abs(trainer_loss.item() + objective.item()) < 1e-6, (step, trainer_loss.item(), -objective.item())
        print(f"step {step}: trainer loss {trainer_loss.item():+.8f}, -olmorl_objective {-objective.item():+.8f}, "
              f"|difference| {abs(trainer_loss.item() + objective.item()):.1e}")
        trainer_grad = _pad_cat([rec["grad"] for rec in recs]).double() / n_proc
        torch.testing.assert_close(trainer_grad, logp_new.grad, atol=1e-6, rtol=1e-5)
        if step % 2 == 0:
            kept_per_generation.append(int(keep.sum()) // G)
    return kept_per_generation


def _logged(results, key):
    return [h[key] for h in results[0]["log_history"] if key in h]


def test_every_step_keeps_a_full_batch_of_signal_groups(tiny_model_dir, tmp_path):
    started = time.monotonic()
    on = _train(str(tiny_model_dir), str(tmp_path / "on"), per_device_batch=4, active=True)
    kept = _check_loss_is_the_objective_over_kept_groups([on])
    assert kept == [GROUPS_PER_STEP, GROUPS_PER_STEP]
    # 2 generation batches (num_iterations 2), each logged on its first step
    assert _logged([on], "active_sampling/groups_kept") == [GROUPS_PER_STEP, GROUPS_PER_STEP]
    sampled = _logged([on], "active_sampling/groups_sampled")
    rounds = _logged([on], "active_sampling/rounds")
    assert len(sampled) == 2 and all(s > GROUPS_PER_STEP for s in sampled), sampled
    assert sampled == [GROUPS_PER_STEP * (r + 1) for r in rounds]
    pages = [p for call in on["calls"] for p, _ in call[::G]]
    assert len(pages) == sum(sampled)
    # each generation: its own chunk of the epoch's order, then the seeded draws of its refill rounds
    assert _steps(on) == _expected_steps(on, pages_per_chunk=4, repeat=4, generation_steps=[0, 2])

    off = _train(str(tiny_model_dir), str(tmp_path / "off"), per_device_batch=4, active=False)
    kept_off = _check_loss_is_the_objective_over_kept_groups([off])
    assert sum(kept_off) == GROUPS_PER_STEP  # one pass over the 8 pages: half the groups dropped
    assert _logged([off], "olmorl/frac_groups_dropped") and not _logged([off], "active_sampling/groups_kept")
    print(f"active sampling: sampled {sampled} kept {kept}; without: kept {kept_off}; "
          f"{time.monotonic() - started:.1f} s")


def test_resumed_run_sees_the_same_pages(tiny_model_dir, tmp_path):
    full = _train(str(tiny_model_dir), str(tmp_path / "full"), per_device_batch=4, active=True, max_steps=4,
                  num_iterations=1, save_steps=2)
    first = _train(str(tiny_model_dir), str(tmp_path / "part"), per_device_batch=4, active=True, max_steps=2,
                   num_iterations=1, save_steps=2)
    resumed = _train(str(tiny_model_dir), str(tmp_path / "part"), per_device_batch=4, active=True, max_steps=4,
                     num_iterations=1, save_steps=2, resume=str(tmp_path / "part" / "checkpoint-2"))
    pages = lambda run: [p for call in run["calls"] for p, _ in call[::G]]  # noqa: E731
    assert pages(first) + pages(resumed) == pages(full)
    assert len(pages(full)) > 4 * GROUPS_PER_STEP, "refills must have taken pages beyond one chunk per step"
    # Refill pages follow from (seed, step, round): the checkpoint holds no position of active sampling's.
    checkpoint = tmp_path / "part" / "checkpoint-2"
    saved = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]
    assert "ActiveSamplingPosition" not in saved
    assert not (checkpoint / "active_sampling_state.json").exists()


def _epoch_orders(epochs: int, pages_per_chunk: int, repeat: int) -> list[list[str]]:
    """Each epoch's page order as the trainer's sampler draws it (seed 0), computed here from the sampler alone."""
    from olmocr_rl.trainer.page_order import EpochSeededRepeatSampler

    sampler = EpochSeededRepeatSampler(data_source=PAGES, mini_repeat_count=G, batch_size=pages_per_chunk,
                                       repeat_count=repeat, shuffle=True, seed=0)
    orders = []
    block = pages_per_chunk * G * repeat
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        indices = list(sampler)
        orders.append([PAGES[i] for start in range(0, len(indices), block)
                       for i in indices[start:start + pages_per_chunk * G:G]])
    return orders


def _steps(run) -> list[list[str]]:
    """The pages each optimizer step generated, in order (its first round and its refills)."""
    rounds = _logged([run], "active_sampling/rounds")
    pages = [[p for p, _ in call[::G]] for call in run["calls"]]
    steps, at = [], 0
    for r in rounds:
        steps.append([p for chunk in pages[at:at + int(r) + 1] for p in chunk])
        at += int(r) + 1
    return steps


def _expected_steps(run, pages_per_chunk: int, repeat: int, generation_steps: list[int]) -> list[list[str]]:
    """What each generation must have seen: the next chunk of the epochs' orders (refills consume none of them),
    then, for refill round r = 1, 2, ..., the pages ``refill_pages`` draws for (seed 0, its global step, r)."""
    from olmocr_rl.trainer.active_sampling import refill_pages

    rounds = _logged([run], "active_sampling/rounds")
    epochs = len(generation_steps) * pages_per_chunk // len(PAGES) + 1
    order = [p for epoch in _epoch_orders(epochs, pages_per_chunk, repeat) for p in epoch]
    expected = []
    for k, (r, step) in enumerate(zip(rounds, generation_steps)):
        refills = [PAGES[i] for rnd in range(1, int(r) + 1)
                   for i in refill_pages(len(PAGES), 0, step, rnd, 1, 0, pages_per_chunk)]
        expected.append(order[k * pages_per_chunk:(k + 1) * pages_per_chunk] + refills)
    return expected


def test_steps_across_the_epoch_boundary_keep_full_batches(tiny_model_dir, tmp_path):
    """2 pages (groups) a step, half of them flat: steps refill, those at an epoch's end as well (refills never run
    out of pages), and the epochs' own pages follow the Trainer's order across the boundary."""
    run = _train(str(tiny_model_dir), str(tmp_path / "run"), per_device_batch=2, active=True, max_steps=8,
                 num_iterations=1)
    assert _logged([run], "active_sampling/groups_kept") == [2] * 8
    assert sum(_logged([run], "active_sampling/rounds")) > 0, "no step refilled: the test no longer tests refills"
    assert _steps(run) == _expected_steps(run, pages_per_chunk=2, repeat=2, generation_steps=list(range(8)))


def test_a_resume_in_the_next_epoch_is_exact_also_from_an_old_checkpoint(tiny_model_dir, tmp_path, caplog):
    """A checkpoint after the epoch boundary (step 5 of 4-step epochs). Its trainer_state.json is given the
    ``ActiveSamplingPosition`` entry an older olmocr_rl wrote: it is ignored, in one warning line, and the resume
    is still exact."""
    full = _train(str(tiny_model_dir), str(tmp_path / "full"), per_device_batch=2, active=True, max_steps=8,
                  num_iterations=1)
    part, at = tmp_path / "part", 5
    first = _train(str(tiny_model_dir), str(part), per_device_batch=2, active=True, max_steps=at,
                   num_iterations=1, save_steps=at)
    state_file = part / f"checkpoint-{at}" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["stateful_callbacks"]["ActiveSamplingPosition"] = {
        "args": {}, "attributes": {"epoch": 1, "batches_consumed": 7, "next_epoch_batches_consumed": 2}}
    state_file.write_text(json.dumps(state))
    caplog.set_level("WARNING", logger="olmocr_rl.trainer.checkpoint_load")
    resumed = _train(str(tiny_model_dir), str(part), per_device_batch=2, active=True, max_steps=8,
                     num_iterations=1, save_steps=at, resume=str(part / f"checkpoint-{at}"))
    pages = lambda run: [p for call in run["calls"] for p, _ in call[::G]]  # noqa: E731
    assert pages(first) + pages(resumed) == pages(full)
    assert _logged([resumed], "active_sampling/groups_kept") == [2] * 8  # the history resumes with the state
    notes = [r.getMessage() for r in caplog.records if "ActiveSamplingPosition" in r.getMessage()]
    assert len(notes) == 1 and "ignored" in notes[0], notes


def test_refill_pages_are_a_function_of_seed_step_and_round():
    from olmocr_rl.trainer.active_sampling import refill_pages

    draw = refill_pages(8, 0, 3, 1, 2, 0, 2) + refill_pages(8, 0, 3, 1, 2, 1, 2)
    assert draw == refill_pages(8, 0, 3, 1, 1, 0, 4)  # the ranks' slices of one draw
    assert len(set(draw)) == 4 and all(0 <= i < 8 for i in draw)  # no page twice while the dataset has enough
    others = {tuple(refill_pages(8, s, t, r, 1, 0, 4)) for s, t, r in [(1, 3, 1), (0, 4, 1), (0, 3, 2)]}
    assert tuple(draw) not in others and len(others) == 3
    small = refill_pages(3, 0, 0, 1, 1, 0, 7)
    assert sorted(small[:3]) == [0, 1, 2] and sorted(small[3:6]) == [0, 1, 2]  # whole permutations, repeated


@pytest.mark.slow
def test_two_gloo_processes(tiny_model_dir, tmp_path):
    import warm_python  # here, not at the top: torchrun runs this file as its workers' script

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = warm_python.run(  # torchrun (python -m torch.distributed.run), its workers forked (tests/warm_python.py)
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
         str(tiny_model_dir), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert [r["rank"] for r in results] == [0, 1]
    assert _check_loss_is_the_objective_over_kept_groups(results) == [GROUPS_PER_STEP, GROUPS_PER_STEP]
    assert _logged(results, "active_sampling/groups_kept") == [GROUPS_PER_STEP, GROUPS_PER_STEP]
    # both processes ran the same rounds (collectives inside), each filling its own 2 groups
    assert len(results[0]["calls"]) == len(results[1]["calls"]) > 2


if __name__ == "__main__":  # the 2-process worker, launched by torchrun from the test above
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    # each process fills its own 2 groups from its half of each chunk: 16 pages, so the epoch does not run out
    result = _train(model_dir, str(out / "out"), per_device_batch=2, active=True, copies=2)
    torch.save(result, out / f"rank{result['rank']}.pt")


# ---- the CLI on a bench folder -----------------------------------------------------------------------------------

FLAT = [("blank.pdf", 1), ("counting.pdf", 1), ("counting.pdf", 2), ("equations.pdf", 1)]
SIGNAL = [("header_footer.pdf", 1), ("paragraphs.pdf", 1), ("simple_lines.pdf", 1), ("two_columns.pdf", 1)]


def _half_flat_bench(folder: Path) -> Path:
    """Half the pages: only an `absent` test for a string the model never writes (every sample scores 1).
    The other half: `baseline` tests with max_length 2, 4, ..., 60 on the alphanumeric count, so samples of
    different lengths score differently."""
    from conftest import BENCH_DATA_SAMPLE

    folder.mkdir(parents=True)
    (folder / "pdfs").symlink_to(BENCH_DATA_SAMPLE / "pdfs", target_is_directory=True)
    rows = [{"pdf": pdf, "page": page, "id": f"{pdf[:-4]}_{page}_absent", "type": "absent", "text": "zqxjvkwqz"}
            for pdf, page in FLAT]
    rows += [{"pdf": pdf, "page": page, "id": f"{pdf[:-4]}_{page}_len{n}", "type": "baseline", "max_length": n}
             for pdf, page in SIGNAL for n in range(2, 61, 2)]
    (folder / "half_flat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.slow
def test_cli_on_a_half_zero_signal_bench_folder(tiny_model_dir, tmp_path):
    bench = _half_flat_bench(tmp_path / "bench")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    import warm_python  # here, not at the top: torchrun runs this file as its workers' script, without tests/ on the path

    def run(name: str, *extra: str) -> list[dict]:
        out = tmp_path / name
        proc = warm_python.run(
            [sys.executable, "-m", "olmocr_rl.grpo_train", "--train_bench_data_folder", str(bench),
             "--model_name", str(tiny_model_dir), "--output_dir", str(out), "--reward_bench", "--olmorl",
             "--num_generations", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
             "--max_completion_length", "8", "--target_longest_image_dim", "256", "--max_steps", "4",
             "--logging_steps", "1", "--save_steps", "100", "--no-log_completions", "--report_to", "none",
             "--vllm_mode", "none", "--temperature", "1.0", "--seed", "0", *extra],
            env=env, capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
        )
        assert proc.returncode == 0, proc.stderr[-6000:]
        return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in r]

    on = run("on", "--active_sampling")
    assert [r["active_sampling/groups_kept"] for r in on] == [1.0] * 4
    sampled = [r["active_sampling/groups_sampled"] for r in on]
    assert sum(sampled) > 4 and all(s == r["active_sampling/rounds"] + 1 for s, r in zip(sampled, on))
    assert all("timing/active_sampling_s" in r for r in on)
    assert all(r["olmorl/tokens_kept"] > 0 for r in on)

    off = run("off")
    dropped = [r["olmorl/frac_groups_dropped"] for r in off]
    assert 0 < sum(dropped) < len(dropped), dropped  # some steps train on nothing without active sampling
    assert "active_sampling/groups_kept" not in off[0]
    print(f"groups sampled per step with active sampling: {sampled}; dropped without: {dropped}")


def test_merge_rows_repads_prompts_left_completions_right_and_keeps_pixels_with_their_rows():
    from olmocr_rl.trainer.active_sampling import merge_rows

    def out(prompts, completions, patches):
        """One scored batch: rows' prompts (left-padded), completions (right-padded), one image per row."""
        pw, cw = max(map(len, prompts)), max(map(len, completions))
        pid = torch.tensor([[9] * (pw - len(p)) + p for p in prompts])
        cid = torch.tensor([c + [9] * (cw - len(c)) for c in completions])
        grids = torch.tensor([[1, 1, n] for n in patches])
        pixels = torch.cat([torch.full((n, 2), float(n)) for n in patches])
        return {"prompt_ids": pid, "prompt_mask": (pid != 9).long(), "completion_ids": cid,
                "completion_mask": (cid != 9).long(), "advantages": torch.arange(len(prompts), dtype=torch.float),
                "num_items_in_batch": torch.tensor(99), "pixel_values": pixels, "image_grid_thw": grids,
                "num_images": [1] * len(prompts)}

    a = out([[1, 2], [3, 4, 5]], [[6], [7, 8, 8]], [2, 3])
    b = out([[1, 2, 3, 4]], [[5, 6, 7, 7, 7]], [4])
    merged = merge_rows([a, b], [(0, 0), (1, 0)], pad_token_id=9)
    assert merged["prompt_ids"].tolist() == [[9, 9, 1, 2], [1, 2, 3, 4]]
    assert merged["prompt_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert merged["completion_ids"].tolist() == [[6, 9, 9, 9, 9], [5, 6, 7, 7, 7]]
    assert merged["completion_mask"].sum(1).tolist() == [1, 5]
    assert merged["advantages"].tolist() == [0.0, 0.0]
    assert merged["image_grid_thw"].tolist() == [[1, 1, 2], [1, 1, 4]]
    assert merged["pixel_values"][:, 0].tolist() == [2.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert merged["num_images"] == [1, 1] and merged["num_items_in_batch"].item() == 99
    # padding that no picked row needs is trimmed
    narrow = merge_rows([a, b], [(0, 0), (0, 0)], pad_token_id=9)
    assert narrow["prompt_ids"].tolist() == [[1, 2], [1, 2]] and narrow["completion_ids"].tolist() == [[6], [6]]
