"""Run the training CLI and record every rollout: ``python tests/vllm_lane/record_rollouts.py OUT.jsonl [--skip-weight-transfer] -- FLAGS``.

A test helper for the vLLM lane. It wraps two TRL methods before ``olmocr_rl.grpo_train.main`` runs:
``GRPOTrainer._generate_single_turn`` (the prompt token ids the trainer scores, and the completion ids
it trains on) and ``VLLMGeneration.generate`` (the prompt token ids as vLLM expanded them), and writes
one JSON line per generation call to OUT.jsonl, with the number of encoder-cache resets of the colocated
engine so far (vLLM's ``LLMEngine.reset_encoder_cache``, wrapped too).

``--skip-weight-transfer`` (server mode on CPU only): TRL's weight transfer to a vLLM server needs
CUDA/NCCL, so the communicator and the weight push are skipped (the rest of TRL's weight sync runs) and
the run says so; the server keeps the weights it loaded, which equal the trainer's at step 1.
"""

from __future__ import annotations

import functools
import json
import sys


def main() -> int:
    argv = sys.argv[1:]
    out_path, rest = argv[0], argv[1:]
    skip_transfer = "--skip-weight-transfer" in rest
    flags = rest[rest.index("--") + 1 :]

    from trl.generation import vllm_client, vllm_generation
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
            "encoder_cache_resets": resets[0],
        })
        with open(out_path, "a") as fh:
            fh.write(json.dumps(records[-1]) + "\n")
        return completion_ids, logprobs

    vllm_generation.VLLMGeneration.generate = generate
    grpo_trainer.GRPOTrainer._generate_single_turn = generate_single_turn
    if skip_transfer:
        print("[record_rollouts] server mode on CPU: weight transfer skipped (TRL's NCCL transfer needs CUDA); "
              "the server serves the weights it loaded", flush=True)
        # Only the NCCL push is skipped: TRL's sync_weights still runs (and resets the server's prefix cache),
        # so olmocr_rl's check of TRL's private surface sees TRL's own method.
        vllm_client.VLLMClient.init_communicator = lambda self, device=None: None
        vllm_client.VLLMClient.update_named_params = lambda self, metadata, named_params: None

    from olmocr_rl import grpo_train

    return grpo_train.main(flags)


if __name__ == "__main__":
    sys.exit(main())
