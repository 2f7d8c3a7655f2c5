"""``--async_generation`` without a server: the pipeline's push rule, its client (a stand-in server that can be held
mid-request), the next batch's pages against a real DataLoader over the trainer's sampler, and the config checks.

The vLLM lane (tests/vllm_lane/test_vllm_async.py) runs the same pipeline against ``trl vllm-serve``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from types import SimpleNamespace

import pytest
from torch.utils.data import DataLoader
from trl.trainer.utils import RepeatSampler

from olmocr_rl.config import checks, parse_args
from olmocr_rl.config.flags import CHOSEN
from olmocr_rl.trainer.async_rollouts import RolloutPipeline, images_digest, prefetching_client
from olmocr_rl.trainer.page_order import epoch_seeded

SAMPLING = {"n": 4, "temperature": 1.0, "max_tokens": 8}


def fake_trainer(*, steps_per_generation=1, grad_acc=1, num_iterations=1, max_steps=10, main=True):
    return SimpleNamespace(
        args=SimpleNamespace(steps_per_generation=steps_per_generation, gradient_accumulation_steps=grad_acc,
                             generation_batch_size=4),
        num_iterations=num_iterations, state=SimpleNamespace(global_step=0, max_steps=max_steps),
        accelerator=SimpleNamespace(is_main_process=main), model=SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list)}, _page_sampler=None,
    )


@pytest.mark.parametrize(("max_staleness", "pushes"), [(1, [0, 1, 2, 3, 4, 5]), (2, [0, 2, 4]), (3, [0, 3])])
def test_weights_are_pushed_only_as_often_as_the_staleness_bound_needs(max_staleness, pushes):
    pipeline = RolloutPipeline(fake_trainer(), max_staleness)
    done = []
    for step in range(6):
        if pipeline.push_due(step):
            pipeline.pushed(step)
            done.append(step)
        # the batch sent now is scored one step later: never older than the bound
        assert step + 1 - pipeline.server_version <= max_staleness
    assert done == pushes


def test_a_generation_batch_that_feeds_several_steps_counts_them():
    trainer = fake_trainer(steps_per_generation=4, grad_acc=2, num_iterations=2)
    assert RolloutPipeline(trainer, 4).steps_per_batch() == 4
    with pytest.raises(ValueError, match="max_staleness must be >= 1"):
        RolloutPipeline(trainer, 0)


class StandInServer:
    """TRL's client API over a fake server: logs requests; ``hold`` keeps a request sent ahead running until released."""

    def __init__(self):
        self.events: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.weights = 0

    def client_base(server):
        class Client:
            def image_features(self, images):
                server.events.append("features")
                return [{"image": len(per_prompt)} for per_prompt in images]

            def generate(self, prompts, features=None, **sampling):
                server.events.append(f"generate w{server.weights}")
                if threading.current_thread().name == "olmocr-rl-prefetch":
                    server.hold.wait(10)  # a request sent ahead runs until released
                return {"completion_ids": [[server.weights]] * len(prompts) * sampling["n"], "weights": server.weights}

            def update_named_params(self, metadata, named):
                server.events.append("push")
                server.weights += 1

        return Client


class ScriptedPipeline(RolloutPipeline):
    """The next batch's prompts come from a list (the real ones come from the sampler: tested below)."""

    def __init__(self, trainer, max_staleness, upcoming):
        super().__init__(trainer, max_staleness)
        self.upcoming = upcoming

    def next_prompts(self):
        return self.upcoming.pop(0)


def page(value: int):
    from PIL import Image

    return Image.new("RGB", (8, 8), (value, 0, 0))


def run_batch(pipeline, client, prompts, images, step):
    """What TRL's server-mode generation does for one training batch, with our trainer's hooks around it."""
    pipeline.trainer.state.global_step = step
    pipeline.begin_batch()
    if pipeline.push_due(step):
        client.update_named_params([], [])
        pipeline.pushed(step)
    features = client.image_features(images) if images is not None else None
    output = client.generate(prompts, features=features, **SAMPLING)
    pipeline.after_generation()
    pipeline.log()
    return output


def test_the_next_batch_is_sampled_while_this_one_trains_and_the_push_waits_for_it():
    server = StandInServer()
    batch = ([[1, 2]], [[page(1)]])
    pipeline = ScriptedPipeline(fake_trainer(), 1, [batch, batch, batch])
    client = prefetching_client(server.client_base(), pipeline)()
    pipeline.attach(client, lambda features, ids: {**features, "placed": len(ids)})

    server.hold.clear()  # the server is still sampling step 2's batch when step 1's optimizer step ends
    first = run_batch(pipeline, client, *batch, step=0)
    assert first["weights"] == 1  # the first push, then a generation of its own
    assert pipeline.pending is not None and pipeline.pending.thread.is_alive()  # the next batch is on the server
    release = threading.Timer(0.3, server.hold.set)
    release.start()
    started = time.perf_counter()
    second = run_batch(pipeline, client, *batch, step=1)
    assert time.perf_counter() - started >= 0.25  # the push waited for the request in flight
    assert second["weights"] == 1  # step 2's completions: sampled by step 1's weights, not regenerated
    assert server.events[:6] == ["push", "features", "generate w1", "features", "generate w1", "push"]
    pipeline.pending.thread.join(5)
    assert server.events[6:] == ["features", "generate w2"]  # after the push, the batch of step 3 went
    metrics = pipeline.trainer._metrics["train"]
    assert metrics["async/prefetched"] == [0.0, 1.0]
    assert metrics["async/staleness"] == [0.0, 1.0]
    assert metrics["async/weight_push"] == [1.0, 1.0]
    assert metrics["async/wait_s"][-1] >= 0.2


def test_a_batch_other_than_the_one_sent_ahead_is_generated_on_the_spot(caplog):
    server = StandInServer()
    ahead, actual = ([[1, 2]], [[page(1)]]), ([[3, 4]], [[page(2)]])
    pipeline = ScriptedPipeline(fake_trainer(), 1, [ahead] * 3)
    client = prefetching_client(server.client_base(), pipeline)()
    pipeline.attach(client, lambda features, ids: features)
    run_batch(pipeline, client, *ahead, step=0)
    with caplog.at_level(logging.WARNING):
        run_batch(pipeline, client, *actual, step=1)
    assert "were not the batch's (a miss)" in caplog.text
    assert pipeline.trainer._metrics["train"]["async/prefetched"] == [0.0, 0.0]
    # same prompt ids, other page pixels: also a miss
    pipeline.pending.thread.join(5)
    run_batch(pipeline, client, [[1, 2]], [[page(9)]], step=2)
    assert pipeline.trainer._metrics["train"]["async/prefetched"][-1] == 0.0
    # a second request in the same batch (an active-sampling refill) never takes what was sent ahead
    pending = pipeline.pending
    client.generate(ahead[0], features=None, **SAMPLING)
    assert pipeline.pending is pending


def test_the_last_step_and_the_other_processes_send_nothing_ahead():
    server = StandInServer()
    batch = ([[1]], None)
    last = ScriptedPipeline(fake_trainer(max_steps=1), 1, [batch])
    client = prefetching_client(server.client_base(), last)()
    last.attach(client, None)
    run_batch(last, client, *batch, step=0)
    assert last.pending is None and last.upcoming == [batch]
    other = ScriptedPipeline(fake_trainer(main=False), 1, [batch])
    other.attach(None, None)
    other.sampling = dict(SAMPLING)
    other.after_generation()
    assert other.pending is None


def test_a_failed_request_sent_ahead_is_raised_on_the_trainer_thread():
    class Failing(StandInServer):
        def client_base(server):
            base = StandInServer.client_base(server)

            class Client(base):
                def generate(self, prompts, features=None, **sampling):
                    if server.events.count("push") == 1 and len(server.events) > 1:
                        raise ConnectionError("server went away")
                    return super().generate(prompts, features=features, **sampling)

            return Client

    server = Failing()
    batch = ([[1]], None)
    pipeline = ScriptedPipeline(fake_trainer(), 1, [batch, batch])
    client = prefetching_client(server.client_base(), pipeline)()
    pipeline.attach(client, None)
    run_batch(pipeline, client, *batch, step=0)
    with pytest.raises(RuntimeError, match="the generation sent ahead failed: server went away"):
        run_batch(pipeline, client, *batch, step=1)


def test_images_digest_tells_pages_apart():
    assert images_digest(None) is None
    assert images_digest([[page(1)], None]) == images_digest([[page(1)], None])
    assert images_digest([[page(1)]]) != images_digest([[page(2)]])


# --- the next batch's pages: what the DataLoader over the trainer's sampler then yields ----------------------

@pytest.mark.parametrize(("pages", "per_device", "spg", "grad_acc", "num_generations", "epochs"),
                         [(3, 4, 1, 1, 4, 3), (5, 4, 2, 2, 2, 2), (4, 2, 1, 1, 2, 3)])
def test_the_pages_sent_ahead_are_the_next_batch_across_epochs(pages, per_device, spg, grad_acc, num_generations,
                                                               epochs):
    rows = [{"prompt": f"page {i}"} for i in range(pages)]
    generation_batch = per_device * spg
    sampler = epoch_seeded(RepeatSampler(rows, mini_repeat_count=num_generations,
                                         batch_size=generation_batch // num_generations, repeat_count=spg,
                                         shuffle=True, seed=7))
    loader = DataLoader(rows, batch_size=per_device * spg, sampler=sampler, collate_fn=lambda batch: batch)
    steps_in_epoch, update_steps = len(loader), len(loader) // grad_acc
    # what the trainer generates from: the first dataloader batch of every generation batch, epoch after epoch
    generated, starts = [], []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for index, batch in enumerate(loader):
            if index % spg == 0:
                generated.append([row["prompt"] for row in batch[::num_generations]])
                starts.append((epoch, index // grad_acc + epoch * update_steps))
    assert len(set(map(tuple, generated))) > 1
    trainer = fake_trainer(steps_per_generation=spg, grad_acc=grad_acc, max_steps=10_000)
    trainer.args.generation_batch_size = generation_batch
    trainer._page_sampler = sampler
    pipeline = RolloutPipeline(trainer, spg)
    for (epoch, step), following in zip(starts, generated[1:]):
        pipeline.epoch_started(epoch, steps_in_epoch, update_steps)
        trainer.state.global_step = step
        assert [row["prompt"] for row in pipeline.next_rows()] == following, (epoch, step)


# --- the flags ------------------------------------------------------------------------------------------------

def flags(**given):
    from argparse import Namespace

    return Namespace(**{**vars(parse_args([])), **given, CHOSEN: frozenset(given)})


def test_async_generation_config_checks():
    assert checks.check_async_generation(flags(), "none", 1) == []
    assert checks.check_async_generation(flags(async_generation=True), "server", 1) == []
    assert checks.check_async_generation(flags(async_generation=True), "colocate", 1) == [
        "--async_generation needs --vllm_mode server (got colocate): the vLLM server samples the next batch while "
        "this process trains; colocated vLLM and HF generate share the trainer's devices"]
    assert checks.check_async_generation(flags(max_staleness=2), "server", 1) == [
        "--max_staleness 2 only applies with --async_generation; add it or drop the flag"]
    mu2 = dict(async_generation=True, num_iterations=2, gradient_accumulation_steps=4)
    problem, = checks.check_async_generation(flags(**mu2), "server", 4)
    assert problem.startswith("--max_staleness 1 is below the 2 optimizer steps") and problem.endswith(
        "use --max_staleness 2")
    assert checks.check_async_generation(flags(**mu2, max_staleness=2), "server", 4) == []
    assert checks.check_async_generation(flags(async_generation=True, vllm_importance_sampling_correction=False),
                                         "server", 1) == [
        "--async_generation trains on completions sampled by older weights; keep "
        "--vllm_importance_sampling_correction on (it corrects the loss for them)"]
    assert "--max_staleness must be > 0 (got 0)" in checks.check_ranges(flags(max_staleness=0))


def test_the_cli_refuses_async_generation_without_a_server_before_anything_loads(tmp_path):
    from olmocr_rl.config import ConfigError, Environment, validate

    base = ["--train_bench_data_folder", str(tmp_path), "--reward_bench", "--num_generations", "4"]
    args = parse_args([*base, "--async_generation"])
    with pytest.raises(ConfigError, match=r"^--async_generation needs --vllm_mode server \(got none\)"):
        validate(args, Environment(cuda=False, vllm=False, num_processes=1))
    config = validate(parse_args(base),
                      Environment(cuda=False, vllm=False, num_processes=1))
    assert config.async_generation is False and config.max_staleness == 1  # the defaults: generation in turn
    from olmocr_rl.trainer.build import trainer_switches

    switches = trainer_switches(config, padding_free=False)
    assert switches["async_generation"] is False and switches["max_staleness"] == 1
    assert switches["vllm_engine_kwargs"] is None  # HF generate: no engine
    server = validate(parse_args([*base, "--vllm_mode", "server"]), Environment(cuda=False, vllm=True, num_processes=1))
    assert trainer_switches(server, padding_free=False)["vllm_engine_kwargs"] == {"dtype": "float32",
                                                                                "enforce_eager": False}  # compiled
    eager = validate(parse_args([*base, "--vllm_mode", "colocate", "--vllm_enforce_eager"]),
                     Environment(cuda=False, vllm=True, num_processes=1))
    assert trainer_switches(eager, padding_free=False)["vllm_engine_kwargs"] == {"dtype": "float32",
                                                                               "enforce_eager": True}
