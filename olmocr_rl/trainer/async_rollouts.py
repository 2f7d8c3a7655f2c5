"""``--async_generation``: the vLLM server samples the next generation batch while the trainer trains on this one.

In server mode the two sides take turns: the server idles while the trainer scores and trains, the trainer idles
while the server samples. With :class:`RolloutPipeline` (the trainer's ``async_generation=`` switch) a step goes:

1. the weight push (only when ``--max_staleness`` needs one, see :meth:`RolloutPipeline.push_due`) first waits
   for the generation in flight, so one group is never sampled from two sets of weights;
2. this batch's completions are the ones prefetched during the previous step (a *hit*), or are generated now
   (the first step, the first after a resume, or a *miss*: the prefetched prompts were not this batch's);
3. right after that, the trainer's main process sends the *next* generation batch's prompts to the server (a
   background thread waits for the answer: :meth:`RolloutPipeline.submit_next`) and goes on to rewards,
   reference log-probs and the optimizer step while the server samples.

The next batch's pages come from the trainer's own page order (``page_order``: each epoch's order is a function of
the seed and the epoch), position by position as the dataloader will hand them out, across epoch boundaries.
A prefetch is used only when its prompt token ids, its page images and its sampling parameters equal those of the
batch the dataloader then yields; anything else is a miss, generated on the spot (``async/prefetched`` 0).

A batch sampled by the weights of optimizer step ``v`` and scored at step ``t`` has *staleness* ``t - v``
(``async/staleness``): 1 at every step with the default ``--max_staleness 1`` (0 on the first step). The loss
corrects for the stale behaviour policy through TRL's vLLM importance-sampling correction, whose ratio compares the
trainer's log-probs with the server's own sampling log-probs (``sampling/is_*`` say how much it masked).

Checkpoints never hold a batch in flight: a resume regenerates the batch that was in flight at the save (the
same pages, sampled again by the checkpoint's weights, staleness 0), so the page order and the optimizer state
resume exactly. A stop (SIGTERM, the last step) leaves at most one request running on the server; the trainer
waits for it at the end of training (:data:`DRAIN_TIMEOUT_S`) so the server is idle for the next run's push.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

__all__ = ["DRAIN_TIMEOUT_S", "Prefetch", "RolloutPipeline", "prefetching_client", "images_digest"]

#: Seconds the end of training waits for a request still in flight before leaving it to the server.
DRAIN_TIMEOUT_S = 120.0


def images_digest(images: list[list | None] | None) -> tuple | None:
    """A digest of a batch's page images (per prompt, per image: size, mode and a hash of the pixels)."""
    if images is None:
        return None

    def one(image) -> tuple:
        return (image.size, image.mode, hashlib.blake2b(image.tobytes(), digest_size=16).digest())

    return tuple(None if not per_prompt else tuple(one(image) for image in per_prompt) for per_prompt in images)


@dataclass
class Prefetch:
    """One generation request sent ahead: what was asked, from which weights, and (once done) the answer."""

    prompts: list[list[int]]
    images: tuple | None
    sampling: dict
    version: int
    submitted: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    features: list | None = None
    output: dict | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def wait(self, timeout: float | None = None) -> Prefetch:
        if self.thread is not None:
            self.thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"vLLM server: the generation sent ahead failed: {self.error}") from self.error
        return self

    @property
    def generate_s(self) -> float:
        return (self.finished or time.perf_counter()) - self.submitted


class RolloutPipeline:
    """The state of asynchronous generation: the server's weights, the request in flight, and this batch's numbers.

    ``trainer`` is the ``PlainGRPOTrainer`` that owns it; the generation backend (``vllm_generation``) calls
    :meth:`push_due` / :meth:`pushed` around each weight push, and the client (:func:`prefetching_client`, which
    :meth:`attach`-es itself when TRL builds it) asks :meth:`features_for` and :meth:`take` before it sends a
    request of its own.
    """

    def __init__(self, trainer, max_staleness: int = 1) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1 (got {max_staleness}); without staleness, generate in turn")
        self.trainer = trainer
        self.max_staleness = int(max_staleness)
        self.server_version: int | None = None  # optimizer step of the weights the server holds (None: unknown)
        self.in_flight: list[Prefetch] = []  # every request sent ahead and not yet waited for
        self.pending: Prefetch | None = None  # the one meant for the next batch
        self.sampling: dict | None = None  # the sampling parameters of the trainer's own requests
        self.client = None
        self.place: Callable | None = None  # VLLMGeneration._place_features: image features onto a prompt's tokens
        self.expect_main = False
        self.features_matched = False
        self.epoch: tuple[int, int, int] | None = None  # (epoch, dataloader batches, optimizer steps) of this epoch
        self.batch: dict[str, float] = {}
        self.callback = _DrainCallback(self)

    # -- the generation backend ------------------------------------------------------------------------------
    def attach(self, client, place: Callable | None = None) -> None:
        """The server's client (built by TRL on the main process), and how features are placed on a prompt's image
        tokens (default: the trainer's backend's ``_place_features``)."""
        self.client, self.place = client, place

    def steps_per_batch(self) -> int:
        """Optimizer steps one generation batch feeds (TRL: steps_per_generation x num_iterations micro-steps)."""
        args = self.trainer.args
        micro = args.steps_per_generation * self.trainer.num_iterations
        return max(1, -(-micro // args.gradient_accumulation_steps))

    def push_due(self, step: int | None = None) -> bool:
        """Whether the weights of ``step`` (default: the trainer's) must go to the server now: the batch sent next
        is scored ``steps_per_batch`` steps later, and its staleness then may not exceed ``max_staleness``."""
        if self.server_version is None:
            return True
        step = self.trainer.state.global_step if step is None else step
        return step + self.steps_per_batch() - self.server_version > self.max_staleness

    def pushed(self, step: int | None = None) -> None:
        self.server_version = self.trainer.state.global_step if step is None else step
        self.batch["async/weight_push"] = 1.0

    def wait_in_flight(self) -> None:
        """Block until every request sent ahead has its answer (before a weight push; at the end of training)."""
        started = time.perf_counter()
        for prefetch in self.in_flight:
            prefetch.wait()
        self.in_flight = [p for p in self.in_flight if p.thread is not None and p.thread.is_alive()]
        self.batch["async/wait_s"] = self.batch.get("async/wait_s", 0.0) + time.perf_counter() - started

    # -- the client ------------------------------------------------------------------------------------------
    def features_for(self, images) -> list | None:
        """The image features sent ahead for these images, when this is the batch's first request and they match."""
        self.features_matched = False
        pending = self.pending
        if not self.expect_main or pending is None or pending.images is None or pending.images != images_digest(images):
            return None
        self._wait(pending)
        self.features_matched = True
        return pending.features

    def take(self, prompts: list[list[int]], sampling: dict) -> dict | None:
        """The answer sent ahead for this request (a hit), or None (generate it now). Only the first request of a
        training batch may take it; refill rounds (active sampling) and evaluation generate on their own."""
        if not self.expect_main:
            return None
        self.expect_main = False
        if self.sampling is None:
            self.sampling = dict(sampling)
        pending, self.pending = self.pending, None
        step = self.trainer.state.global_step
        if pending is not None and (pending.images is None or self.features_matched) and \
                pending.sampling == sampling and [list(p) for p in prompts] == pending.prompts:
            self._wait(pending)
            self.batch.update({"async/prefetched": 1.0, "async/staleness": float(step - pending.version),
                               "async/server_generate_s": pending.generate_s})
            return pending.output
        if pending is not None:
            logger.warning("async generation: the prompts sent ahead for step %d were not the batch's (a miss): "
                           "generating it now", step + 1)
        version = step if self.server_version is None else self.server_version
        self.batch.update({"async/prefetched": 0.0, "async/staleness": float(step - version)})
        return None

    def _wait(self, pending: Prefetch) -> None:
        started = time.perf_counter()
        pending.wait()
        self.batch["async/wait_s"] = self.batch.get("async/wait_s", 0.0) + time.perf_counter() - started

    # -- the trainer -----------------------------------------------------------------------------------------
    def epoch_started(self, epoch: int, steps_in_epoch: int, update_steps_per_epoch: int) -> None:
        self.epoch = (int(epoch), int(steps_in_epoch), int(update_steps_per_epoch))

    def begin_batch(self) -> None:
        """A training batch's generation starts (``_generate_and_score_completions``)."""
        self.expect_main, self.features_matched = True, False
        self.batch = {"async/weight_push": 0.0}

    def after_generation(self) -> None:
        """The batch's own completions are in: send the next batch's prompts (main process; once per batch)."""
        if self.expect_main:  # this generation did not go through the server's client (cannot happen in server mode)
            self.expect_main = False
        trainer = self.trainer
        if self.pending is not None or self.sampling is None or not trainer.model.training:
            return
        if not trainer.accelerator.is_main_process or self.client is None:
            return
        if trainer.state.global_step + self.steps_per_batch() >= trainer.state.max_steps:
            return  # this batch is the run's last
        self.submit_next()

    def submit_next(self) -> None:
        started = time.perf_counter()
        prompts, images = self.next_prompts()
        if prompts is None:
            return
        prefetch = Prefetch(prompts=prompts, images=images_digest(images), sampling=dict(self.sampling),
                            version=self.server_version)
        prefetch.thread = threading.Thread(target=self._generate_ahead, args=(prefetch, images), daemon=True,
                                           name="olmocr-rl-prefetch")
        prefetch.thread.start()
        self.pending = prefetch
        self.in_flight.append(prefetch)
        self.batch["async/submit_s"] = time.perf_counter() - started

    def _generate_ahead(self, prefetch: Prefetch, images) -> None:
        try:
            client = self.client
            if images is not None:
                raw = client.base_image_features(images)
                prefetch.features = raw
                place = self.place or self.trainer.vllm_generation._place_features
                placed = [place(features, ids) for features, ids in zip(raw, prefetch.prompts, strict=True)]
            else:
                placed = None
            prefetch.output = client.base_generate(prompts=prefetch.prompts, features=placed, **prefetch.sampling)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the trainer's thread by Prefetch.wait
            prefetch.error = exc
        finally:
            prefetch.finished = time.perf_counter()

    def next_prompts(self) -> tuple[list[list[int]] | None, list | None]:
        """The token ids and images of the next generation batch's distinct prompts, in the order the server will be
        asked for them (process 0's rows first), built the way TRL builds a batch's prompts."""
        rows = self.next_rows()
        if rows is None:
            return None, None
        from trl.data_utils import prepare_multimodal_messages

        trainer = self.trainer
        prompts = []
        for row in rows:
            images = row.get("images") if "images" in row else ([row["image"]] if row.get("image") is not None else None)
            prompts.append(prepare_multimodal_messages(row["prompt"], images=images) if images else row["prompt"])
        prompt_ids, images, _ = trainer._tokenize_prompts(prompts)
        return [list(map(int, ids)) for ids in prompt_ids], images

    def next_rows(self) -> list[dict] | None:
        """The dataset rows, one per group, of the generation batch after this one, or None when unknown."""
        trainer, sampler = self.trainer, getattr(self.trainer, "_page_sampler", None)
        if self.epoch is None or sampler is None:
            return None
        epoch, steps_in_epoch, update_steps = self.epoch
        repeat, size = sampler.repeat_count, trainer.args.generation_batch_size
        batch_index = (trainer.state.global_step - epoch * update_steps) * trainer.args.gradient_accumulation_steps
        chunk = batch_index // repeat + 1
        if chunk >= steps_in_epoch // repeat:
            epoch, chunk = epoch + 1, 0
        order = epoch_order(sampler, epoch)
        start = chunk * repeat * size
        indices = order[start:start + size:sampler.mini_repeat_count]
        if len(indices) * sampler.mini_repeat_count != size:
            return None
        dataset = sampler.data_source
        return [dataset[int(index)] for index in indices]

    def log(self) -> None:
        """This training batch's ``async/*`` numbers, into TRL's metrics (averaged over the logging interval)."""
        for key, value in self.batch.items():
            self.trainer._metrics["train"][key].append(value)

    def drain(self, timeout: float = DRAIN_TIMEOUT_S) -> None:
        """End of training: wait (bounded) for a request still running, so the server is idle afterwards."""
        deadline = time.monotonic() + timeout
        for prefetch in self.in_flight:
            if prefetch.thread is not None:
                prefetch.thread.join(max(0.0, deadline - time.monotonic()))
        self.in_flight, self.pending = [], None


def epoch_order(sampler, epoch: int) -> list[int]:
    """Every index the train sampler yields in ``epoch`` (its order depends on the seed and the epoch only), from a
    copy of it, so the sampler the dataloader iterates is untouched."""
    copy = type(sampler)(data_source=sampler.data_source, mini_repeat_count=sampler.mini_repeat_count,
                         batch_size=sampler.batch_size, repeat_count=sampler.repeat_count, shuffle=sampler.shuffle,
                         seed=sampler.seed)
    copy.set_epoch(epoch)
    return list(iter(copy))


class _DrainCallback(TrainerCallback):
    def __init__(self, pipeline: RolloutPipeline) -> None:
        self.pipeline = pipeline

    def on_train_end(self, args, state, control, **kwargs):
        self.pipeline.drain()


def prefetching_client(base: type, pipeline: RolloutPipeline) -> type:
    """``base`` (TRL's ``VLLMClient``, or the gloo client without CUDA) answering the trainer's requests from what
    ``pipeline`` sent ahead, and pushing weights only once nothing is in flight."""

    class PrefetchingVLLMClient(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            pipeline.attach(self)

        def image_features(self, images, *args: Any, **kwargs: Any):
            features = pipeline.features_for(images)
            return features if features is not None else super().image_features(images, *args, **kwargs)

        def generate(self, prompts, features=None, **sampling: Any):
            output = pipeline.take(prompts, sampling)
            return output if output is not None else super().generate(prompts, features=features, **sampling)

        def update_named_params(self, *args: Any, **kwargs: Any):
            pipeline.wait_in_flight()  # never two sets of weights within one generation request
            return super().update_named_params(*args, **kwargs)

        # the background thread's requests, past the lookups above
        def base_image_features(self, images):
            return super().image_features(images)

        def base_generate(self, **kwargs: Any):
            return super().generate(**kwargs)

    PrefetchingVLLMClient.__qualname__ = f"Prefetching{base.__name__}"
    return PrefetchingVLLMClient
