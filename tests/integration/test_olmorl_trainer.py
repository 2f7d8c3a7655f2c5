"""OlmoRLGRPOTrainer on the tiny model: its loss is ``-olmorl_objective`` of its own log-probs.

The equivalence tests train two optimizer steps on one generation batch of 4 pages x G=2 completions,
one page ("flat") rewarded 0.5 whatever is written, so its group carries no signal and must leave the
loss and its normaliser. With num_iterations=2 the second step reuses the batch under updated weights, so
ratios move off 1 and the clipping is exercised. For every optimizer step the test rebuilds the whole
generation batch from what the trainer computed (its log-probs, old log-probs, padding mask) and the raw
rewards, computes ``olmorl_objective`` by hand, and compares it with the sum of the trainer's
micro-batch losses (averaged over processes, as DDP averages gradients), and the gradient reaching the
trainer's log-probs with the hand gradient.

Run directly (``torchrun --nproc_per_node 2 tests/integration/test_olmorl_trainer.py MODEL_DIR OUT_DIR``), this file is
the worker of the 2-process (gloo) test.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from olmocr_rl.olmorl import group_advantages, nonzero_signal_groups, olmorl_objective
from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer, olmorl_config_overrides

G = 2
PAGES = ["flat", "alpha", "beta", "gamma"]
GENERATION_BATCH = 8  # 4 pages x G=2, on 1 or 2 processes


def _page_image(text: str):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (96, 128), "white")
    ImageDraw.Draw(image).text((8, 8), text, fill="black")
    return image


def _dataset():
    from datasets import Dataset

    prompt = [{"role": "user", "content": [{"type": "text", "text": "Transcribe."}, {"type": "image"}]}]
    return Dataset.from_list([{"prompt": prompt, "image": _page_image(p), "page": p} for p in PAGES])


def _recording_reward(calls: list):
    """0.5 for every completion of page "flat"; elsewhere (i % 2) + (len % 7) / 10, so the two completions
    of a group (consecutive, i even then odd) always differ."""

    def page_reward(completions, page, **kwargs):
        rewards = [
            0.5 if p == "flat" else (i % 2) + (len(c[0]["content"]) % 7) / 10
            for i, (c, p) in enumerate(zip(completions, page))
        ]
        calls.append(rewards)
        return rewards

    return page_reward


class TracingTrainer(OlmoRLGRPOTrainer):
    """Records, per micro-batch, what the loss was computed from; tags rows with their global index."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace: list[dict] = []
        self._tracing = False
        self._traced_logps = None

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        n = output["advantages"].shape[0]
        output["trace_row"] = torch.arange(n) + self.accelerator.process_index * n  # survives shuffle/split
        return output

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._tracing:
            logps.retain_grad()  # the gradient the trainer's backward sends to its own log-probs
            self._traced_logps = logps
        return logps, entropies, aux

    def _compute_loss(self, model, inputs):
        self._tracing = True
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._tracing = False
        old = inputs.get("old_per_token_logps")
        self.trace.append({
            "step": self.state.global_step,
            "row": inputs["trace_row"].cpu(),
            "logps": self._traced_logps,
            "old": None if old is None else old.detach().cpu(),
            "mask": inputs["completion_mask"].cpu(),
            "adv": inputs["advantages"].detach().cpu(),
            "loss": loss.detach().cpu(),
        })
        return loss

    def trace_records(self) -> list[dict]:
        """The trace with gradients read out (after training), as plain CPU tensors."""
        out = []
        for r in self.trace:
            logps = r["logps"]
            out.append({**r, "logps": logps.detach().cpu(), "grad": logps.grad.detach().cpu()})
        return out


def _train(model_dir: str, out_dir: str, per_device_batch: int):
    from trl import GRPOConfig

    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(model_dir)
    calls: list = []
    args = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=per_device_batch, gradient_accumulation_steps=2,
        num_generations=G, num_iterations=2, max_completion_length=8, max_steps=2, learning_rate=0.05,
        report_to="none", use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", seed=0,
        **olmorl_config_overrides(),
    )
    trainer = TracingTrainer(model=model, args=args, processing_class=processor,
                             reward_funcs=_recording_reward(calls), train_dataset=_dataset())
    trainer.train()
    return {
        "calls": calls,
        "trace": trainer.trace_records(),
        "log_history": trainer.state.log_history,
        "rank": trainer.accelerator.process_index,
        "world_size": trainer.accelerator.num_processes,
        "params": torch.cat([p.detach().flatten() for p in trainer.model.parameters()]),
    }


def _pad_cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in tensors])


def _check_against_hand_computation(results: list[dict]) -> None:
    """The heart of the equivalence tests; ``results`` holds one ``_train`` result per process, by rank."""
    n_proc = len(results)
    assert [(r["rank"], r["world_size"]) for r in results] == [(i, n_proc) for i in range(n_proc)]
    for r in results[1:]:  # DDP kept the replicas identical, so gradients were averaged over processes
        assert torch.equal(r["params"], results[0]["params"])
    assert all(len(r["calls"]) == 1 for r in results), "expected exactly one generation batch"
    # rank r holds global rows r*n_local ... (r+1)*n_local - 1, as TRL gathers them
    rewards = torch.tensor([x for r in results for x in r["calls"][0]], dtype=torch.float64)
    assert rewards.shape == (GENERATION_BATCH,)
    keep_rows = nonzero_signal_groups(rewards, G).repeat_interleave(G)
    assert keep_rows.tolist().count(False) == G, "the batch must hold exactly one zero-signal group"
    adv_all = group_advantages(rewards, G, normalize_std=False)

    records = [rec for r in results for rec in r["trace"]]
    steps = sorted({rec["step"] for rec in records})
    assert steps == [0, 1]
    clipped_somewhere = nonzero_value_seen = False
    for step in steps:
        recs = [rec for rec in records if rec["step"] == step]
        rows = torch.cat([rec["row"] for rec in recs])
        assert sorted(rows.tolist()) == list(range(GENERATION_BATCH)), "each row once per optimizer step"
        logp_new = _pad_cat([rec["logps"] for rec in recs]).double().requires_grad_(True)
        logp_old = _pad_cat([rec["logps"] if rec["old"] is None else rec["old"] for rec in recs]).double()
        mask = _pad_cat([rec["mask"] for rec in recs])
        keep = keep_rows[rows]
        adv = adv_all[rows]

        # the trainer's advantages are the hand ones, zero for the dropped group
        trainer_adv = torch.cat([rec["adv"] for rec in recs]).double()
        torch.testing.assert_close(trainer_adv, torch.where(keep, adv, 0.0), atol=1e-6, rtol=0)

        objective = olmorl_objective(logp_new, logp_old, adv, mask * keep[:, None])
        (-objective).backward()
        trainer_loss = sum(rec["loss"].double() for rec in recs) / n_proc  # DDP averages over processes
        assert abs(trainer_loss.item() - (-objective.item())) < 1e-6, (step, trainer_loss.item(), -objective.item())

        # each process's loss is normalised by kept tokens / n_proc, DDP then divides its gradient by n_proc
        trainer_grad = _pad_cat([rec["grad"] for rec in recs]).double() / n_proc
        torch.testing.assert_close(trainer_grad, logp_new.grad, atol=1e-6, rtol=1e-5)
        assert (trainer_grad[~keep] == 0).all()

        # had the dropped group stayed in the normaliser, the value would differ (it dilutes the mean); at
        # ratio 1 with equal lengths both are 0 (advantages sum to 0 per group), but the gradient check
        # above already pins the normaliser there
        if abs(objective.item()) > 1e-4:
            diluted = olmorl_objective(logp_new.detach(), logp_old, torch.where(keep, adv, 0.0), mask)
            assert abs(diluted.item() - objective.item()) > 1e-5
            nonzero_value_seen = True

        ratio = torch.exp(logp_new.detach() - logp_old)[(mask * keep[:, None]) != 0]
        if step == 1:
            assert (ratio != 1).any(), "the second step must be off-policy"
        clipped_somewhere |= bool(((ratio < 0.8) | (ratio > 1.272)).any())
    assert clipped_somewhere, "the learning rate should push some ratios outside [0.8, 1.272]"
    assert nonzero_value_seen, "some step should have a non-zero objective, or the value check proves little"

    # the logged metrics (main process) describe the same batch
    logged = [h for h in results[0]["log_history"] if "olmorl/frac_groups_dropped" in h]
    assert len(logged) == 1
    assert logged[0]["olmorl/frac_groups_dropped"] == pytest.approx(1 / len(PAGES))
    step0 = [rec for rec in records if rec["step"] == 0]
    kept_tokens = sum(int((rec["mask"] * keep_rows[rec["row"]][:, None]).sum()) for rec in step0)
    all_tokens = sum(int(rec["mask"].sum()) for rec in step0)
    assert logged[0]["olmorl/tokens_kept"] == kept_tokens
    assert logged[0]["olmorl/frac_tokens_kept"] == pytest.approx(kept_tokens / all_tokens)


def test_equivalence_one_process(tiny_model_dir, tmp_path):
    result = _train(str(tiny_model_dir), str(tmp_path / "out"), per_device_batch=4)
    _check_against_hand_computation([result])


def test_equivalence_two_gloo_processes_with_grad_accumulation(tiny_model_dir, tmp_path):
    import warm_python  # here, not at the top: torchrun runs this file as its workers' script

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    started = time.monotonic()
    proc = warm_python.run(  # torchrun (python -m torch.distributed.run), its workers forked (tests/warm_python.py)
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
         str(tiny_model_dir), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    _check_against_hand_computation(results)
    print(f"2-process run took {time.monotonic() - started:.1f} s")


def test_batch_with_no_signal_trains_on_nothing(tiny_model_dir, tmp_path):
    """Every group flat: loss 0, weights untouched, dropped fraction 1, and the eval pass (G=1) agrees."""
    from trl import GRPOConfig

    from olmocr_rl.model.loading import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_model_dir))
    before = torch.cat([p.detach().flatten() for p in model.parameters()])

    def constant_reward(completions, **kwargs):
        return [0.25] * len(completions)

    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, per_device_eval_batch_size=2, num_generations=2,
        num_generations_eval=1, max_completion_length=4, max_steps=1, learning_rate=0.05, report_to="none",
        use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", seed=0, **olmorl_config_overrides(),
    )
    dataset = _dataset()
    trainer = OlmoRLGRPOTrainer(model=model, args=args, processing_class=processor, reward_funcs=constant_reward,
                                train_dataset=dataset, eval_dataset=dataset.select([1, 2]))
    trainer.train()
    after = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    logged = next(h for h in trainer.state.log_history if "olmorl/frac_groups_dropped" in h)
    assert logged["loss"] == 0.0
    assert (logged["olmorl/frac_groups_dropped"], logged["olmorl/tokens_kept"]) == (1.0, 0.0)
    assert torch.equal(before, after)  # zero gradient, so AdamW (no weight decay) leaves the weights
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == 0.0 and metrics["eval_olmorl/frac_groups_dropped"] == 1.0


if __name__ == "__main__":  # the 2-process worker, launched by torchrun from test_equivalence_two_gloo_processes_with_grad_accumulation
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    result = _train(model_dir, str(out / "out"), per_device_batch=2)
    torch.save(result, out / f"rank{result['rank']}.pt")
