"""Run the training CLI and record every rollout: ``python tests/vllm_lane/record_rollouts.py OUT.jsonl -- FLAGS``.

A test helper for the vLLM lane. It wraps two TRL methods before ``olmocr_rl.grpo_train.main`` runs:
``GRPOTrainer._generate_single_turn`` (the prompt token ids the trainer scores, and the completion ids
it trains on) and ``VLLMGeneration.generate`` (the prompt token ids as vLLM expanded them), and writes
one JSON line per generation call to OUT.jsonl (with a hash of its first page image), with the number of encoder-cache resets of the colocated
engine so far (vLLM's ``LLMEngine.reset_encoder_cache``, wrapped too) and, in server mode, the number of
weight pushes (``/update_weights``) and encoder-cache resets (``/reset_encoder_cache``) posted to the server.
"""

from __future__ import annotations

import functools
import json
import sys


def _digest(images) -> str | None:
    """A hash of the first sample's first image (which page it is: pages of one size share their token ids)."""
    import hashlib

    first = images[0][0] if images and images[0] else None
    return None if first is None else hashlib.blake2b(first.tobytes(), digest_size=8).hexdigest()


def main() -> int:
    argv = sys.argv[1:]
    out_path, rest = argv[0], argv[1:]
    flags = rest[rest.index("--") + 1 :]

    import requests
    from trl.generation import vllm_generation
    from trl.trainer import grpo_trainer

    from vllm.v1.engine.llm_engine import LLMEngine

    records: list[dict] = []
    vllm_views: list[list[list[int]]] = []
    resets = [0]
    base_reset = LLMEngine.reset_encoder_cache

    def reset_encoder_cache(self):
        resets[0] += 1
        return base_reset(self)

    LLMEngine.reset_encoder_cache = reset_encoder_cache

    posts = {"update_weights": 0, "reset_encoder_cache": 0}
    base_post = requests.Session.post

    def post(self, url, *args, **kwargs):
        endpoint = str(url).rsplit("/", 1)[-1]
        response = base_post(self, url, *args, **kwargs)
        if endpoint in posts and response.status_code == 200:
            posts[endpoint] += 1
        return response

    requests.Session.post = post

    base_generate = vllm_generation.VLLMGeneration.generate

    @functools.wraps(base_generate)  # __wrapped__: the private-surface check reads TRL's own source and signature
    def generate(self, prompts, images, num_generations, profiler=None):
        result = base_generate(self, prompts, images, num_generations, profiler=profiler)
        vllm_views.append([list(map(int, ids)) for ids in result[0]])
        return result

    base_turn = grpo_trainer.GRPOTrainer._generate_single_turn

    @functools.wraps(base_turn)
    def generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        completion_ids, logprobs = base_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                             has_tool_images=has_tool_images)
        records.append({
            "step": int(self.state.global_step),
            "trainer_prompt_ids": [list(map(int, ids)) for ids in prompt_ids],
            "vllm_prompt_ids": vllm_views[-1] if vllm_views else None,
            "completion_ids": [list(map(int, ids)) for ids in completion_ids],
            "first_image_digest": _digest(images),
            "encoder_cache_resets": resets[0],
            "server_weight_pushes": posts["update_weights"],
            "server_encoder_cache_resets": posts["reset_encoder_cache"],
        })
        with open(out_path, "a") as fh:
            fh.write(json.dumps(records[-1]) + "\n")
        return completion_ids, logprobs

    vllm_generation.VLLMGeneration.generate = generate
    grpo_trainer.GRPOTrainer._generate_single_turn = generate_single_turn
    from olmocr_rl import grpo_train

    return grpo_train.main(flags)


if __name__ == "__main__":
    sys.exit(main())
