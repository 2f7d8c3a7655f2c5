"""Checkpoint souping: the uniform weight average of N fine-tuned checkpoints of one model.

olmOCR 2 merged six RL runs (different seeds) this way before release. Run:

    python -m olmocr_rl.soup out/run-seed1/checkpoint-500 out/run-seed2/checkpoint-500 out/soup

Contract:
  * Inputs are local Hugging Face checkpoint folders (no ``s3://``: download first) with a
    ``config.json`` and weights as ``*.safetensors`` (one file or shards with
    ``model.safetensors.index.json``) or, failing that, ``pytorch_model*.bin``; or LoRA adapter folders
    (``adapter_config.json``: a ``--use_peft`` checkpoint, or a run's ``adapter/``), each merged onto its
    base model first (averaging adapters is not averaging models: the product of two averaged factors is
    not the average of the products). A merged input is written to a temporary folder beside OUT_DIR, one at
    a time, and removed at the end.
  * Every input must have the same ``architectures`` and ``model_type``, the same weight files, and in
    each file the same tensor names, shapes and dtypes; otherwise nothing is written and the command
    exits with a one-line error naming the first difference.
  * Floating tensors are summed in fp32 (fp64 stays fp64), in the order the inputs are given, divided by
    N and cast back to their stored dtype. Integer/bool tensors (buffers, not weights) must be identical
    in every input and are copied.
  * Output is safetensors with the first input's sharding layout (same shard names and tensor->shard
    map; ``.bin`` inputs become ``model*.safetensors`` with the index renamed to match).
  * Every other top-level file of the first input is copied (config.json, generation_config.json,
    tokenizer/processor files, chat template, ...) except trainer state: optimizer/scheduler/RNG state,
    ``trainer_state.json``, ``training_args.bin``, any ``*.pt``/``*.pth``, DeepSpeed leftovers.
    Sub-folders (e.g. DeepSpeed ``global_step*``) are not copied.
  * Memory: tensors are streamed one at a time from memory-mapped inputs (one input's copy of a tensor
    plus its fp32 accumulator at any moment); what stays resident is the output shard being assembled
    in its stored dtype. Peak: one shard + one tensor in fp32, at most about one model in fp32 (an
    unsharded bf16 model is half that; HF's default 5 GB shards far less).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file

SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"

# Trainer/optimizer state: per-run, meaningless for an averaged model, and often larger than the model.
TRAINING_STATE_PATTERNS = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "training_args.bin",
    "*.pt",
    "*.pth",
    "latest",  # DeepSpeed's pointer to its global_step* state folder
    "zero_to_fp32.py",
)


class SoupError(ValueError):
    """A user-fixable problem with the soup inputs or output; the message says which and how to fix it."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one stored tensor (read from the file header, no data loaded)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass
class CheckpointLayout:
    """What one checkpoint folder holds: its weight files (in order) and the tensors of each."""

    path: Path
    weight_format: str  # "safetensors" or "bin"
    index_name: str | None  # the sharding index file, when the weights are sharded with one
    files: dict[str, list[TensorSpec]] = field(default_factory=dict)
    metadata: dict[str, dict[str, str] | None] = field(default_factory=dict)


@dataclass
class SoupSummary:
    """What ``soup_checkpoints`` wrote: output folder, weight files, tensor count, copied/dropped files."""

    out_dir: Path
    weight_files: list[str]
    num_tensors: int
    copied: list[str]
    dropped: list[str]


def _is_training_state(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in TRAINING_STATE_PATTERNS)


def _is_stale_weights(name: str) -> bool:
    # A folder with both formats loads the safetensors; copying the unaveraged .bin would shadow nothing
    # but would ship the first run's weights under the soup's name.
    return name == BIN_INDEX or (name.startswith("pytorch_model") and name.endswith(".bin"))


def _bin_to_safetensors_name(name: str) -> str:
    """``pytorch_model-00001-of-00002.bin`` -> ``model-00001-of-00002.safetensors`` (HF's naming)."""
    return re.sub(r"^pytorch_model", "model", name[: -len(".bin")]) + ".safetensors"


def _read_config(ckpt: Path) -> dict:
    config_path = ckpt / "config.json"
    if not config_path.is_file():
        raise SoupError(f"{ckpt}: no config.json; soup needs it to check the architectures match")
    try:
        return json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise SoupError(f"{config_path}: not valid JSON ({err})") from None


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    # mmap keeps memory at what is touched; weights_only refuses pickled code.
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:  # torch raises several types for corrupt or non-state-dict files
        raise SoupError(f"{path}: cannot be read as a PyTorch state dict ({err})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise SoupError(f"{path}: is not a flat state dict of tensors")
    return state


def read_layout(ckpt: Path) -> CheckpointLayout:
    """Scan one checkpoint folder's weight files and tensor headers (no tensor data is read)."""
    if not ckpt.exists():
        raise SoupError(f"{ckpt}: no such directory")
    if not ckpt.is_dir():
        raise SoupError(f"{ckpt}: is not a directory (soup takes checkpoint folders)")
    names = sorted(p.name for p in ckpt.iterdir() if p.is_file())
    if any(n.startswith("adapter_model.") for n in names):  # adapter folders were merged before this point
        raise SoupError(f"{ckpt}: holds LoRA adapter weights (adapter_model.*) but no adapter_config.json, so "
                        "its base model is unknown; pass the adapter's own folder (with its adapter_config.json)")
    safetensors_files = [n for n in names if n.endswith(".safetensors")]
    bin_files = [n for n in names if n.startswith("pytorch_model") and n.endswith(".bin")]
    if safetensors_files:
        layout = CheckpointLayout(
            ckpt, "safetensors", SAFETENSORS_INDEX if SAFETENSORS_INDEX in names else None
        )
        for name in safetensors_files:
            try:
                with safe_open(ckpt / name, framework="pt") as handle:
                    layout.metadata[name] = handle.metadata()
                    specs = []
                    for key in handle.keys():
                        sliced = handle.get_slice(key)
                        specs.append(TensorSpec(key, tuple(sliced.get_shape()), _st_dtype(sliced.get_dtype())))
            except SoupError:
                raise
            except Exception as err:
                raise SoupError(f"{ckpt / name}: cannot be read as safetensors ({err})") from None
            layout.files[name] = specs
    elif bin_files:
        layout = CheckpointLayout(ckpt, "bin", BIN_INDEX if BIN_INDEX in names else None)
        for name in bin_files:
            state = _load_bin(ckpt / name)
            layout.files[name] = [TensorSpec(k, tuple(v.shape), v.dtype) for k, v in state.items()]
            layout.metadata[name] = None
    else:
        raise SoupError(f"{ckpt}: no weights found (expected *.safetensors or pytorch_model*.bin)")
    if layout.index_name is not None:
        _check_index(ckpt / layout.index_name, layout)
    return layout


_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


def _st_dtype(code: str) -> torch.dtype:
    if code not in _SAFETENSORS_DTYPES:
        raise SoupError(f"safetensors dtype {code} is not supported by soup")
    return _SAFETENSORS_DTYPES[code]


def _check_index(index_path: Path, layout: CheckpointLayout) -> None:
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise SoupError(f"{index_path}: not a valid sharding index (needs a 'weight_map'): {err}") from None
    stored = {spec.name: name for name, specs in layout.files.items() for spec in specs}
    for tensor, shard in weight_map.items():
        if stored.get(tensor) != shard:
            raise SoupError(
                f"{index_path}: maps {tensor} to {shard} but it is stored in {stored.get(tensor, 'no file')}; "
                "the index does not describe the weight files next to it"
            )


def check_compatible(layouts: Sequence[CheckpointLayout], configs: Sequence[dict]) -> None:
    """Raise ``SoupError`` naming the first difference that makes averaging meaningless.

    Compares every input with the first: ``architectures`` and ``model_type`` in config.json, weight
    format, the set of weight files, and per file the tensor names, shapes and dtypes.
    """
    ref, ref_config = layouts[0], configs[0]
    for layout, config in zip(layouts[1:], configs[1:]):
        for key in ("architectures", "model_type"):
            if config.get(key) != ref_config.get(key):
                raise SoupError(
                    f"architecture mismatch: {ref.path}/config.json has {key}={ref_config.get(key)!r} "
                    f"but {layout.path}/config.json has {config.get(key)!r}; only checkpoints of one model can be souped"
                )
        if layout.weight_format != ref.weight_format:
            raise SoupError(
                f"weight format mismatch: {ref.path} stores {ref.weight_format}, {layout.path} stores "
                f"{layout.weight_format}; re-save one so both use the same format"
            )
        if set(layout.files) != set(ref.files):
            only_ref = sorted(set(ref.files) - set(layout.files))
            only_this = sorted(set(layout.files) - set(ref.files))
            raise SoupError(
                f"weight files differ: only in {ref.path}: {only_ref}; only in {layout.path}: {only_this}; "
                "re-save the checkpoints with the same sharding"
            )
        for name, ref_specs in ref.files.items():
            ref_by_name = {s.name: s for s in ref_specs}
            by_name = {s.name: s for s in layout.files[name]}
            if set(by_name) != set(ref_by_name):
                missing = sorted(set(ref_by_name) - set(by_name))[:3]
                extra = sorted(set(by_name) - set(ref_by_name))[:3]
                raise SoupError(
                    f"tensor names differ in {name}: {layout.path} lacks {missing} and has extra {extra} "
                    f"compared with {ref.path}"
                )
            for tensor, ref_spec in ref_by_name.items():
                spec = by_name[tensor]
                if spec.shape != ref_spec.shape:
                    raise SoupError(
                        f"shape mismatch for {tensor} in {name}: {list(ref_spec.shape)} in {ref.path} vs "
                        f"{list(spec.shape)} in {layout.path}"
                    )
                if spec.dtype != ref_spec.dtype:
                    raise SoupError(
                        f"dtype mismatch for {tensor} in {name}: {ref_spec.dtype} in {ref.path} vs "
                        f"{spec.dtype} in {layout.path}; cast the checkpoints to one dtype first"
                    )


def average_tensors(tensors: Iterable[torch.Tensor], name: str = "tensor") -> torch.Tensor:
    """Uniform mean of same-shape tensors, summed in order in fp32 (fp64 if stored so), cast back.

    ``tensors`` is consumed one at a time, so a lazy iterable keeps only one input tensor in memory
    beside the fp32 accumulator. Non-floating tensors must all be equal and the first is returned
    (averaging integer buffers such as position ids has no meaning); a difference raises ``SoupError``.
    """
    iterator = iter(tensors)
    first = next(iterator)
    if not first.is_floating_point():
        for other in iterator:
            if not torch.equal(first, other):
                raise SoupError(f"non-floating tensor {name} ({first.dtype}) differs between inputs; cannot average it")
        return first.clone()
    acc_dtype = torch.float64 if first.dtype == torch.float64 else torch.float32
    stored_dtype = first.dtype
    acc = first.to(acc_dtype, copy=True)
    count = 1
    del first
    for tensor in iterator:
        acc += tensor.to(acc_dtype)
        count += 1
    acc /= count
    return acc.to(stored_dtype)


class _Reader:
    """Opens one weight file of every input and hands out tensors by name."""

    def __init__(self, layouts: Sequence[CheckpointLayout], name: str):
        self.format = layouts[0].weight_format
        if self.format == "safetensors":
            self._handles = [safe_open(layout.path / name, framework="pt") for layout in layouts]
        else:
            self._handles = [_load_bin(layout.path / name) for layout in layouts]

    def get(self, tensor: str) -> Iterator[torch.Tensor]:
        """The tensor from each input in turn, read only when the consumer asks for it."""
        for handle in self._handles:
            yield handle.get_tensor(tensor) if self.format == "safetensors" else handle[tensor]


def _prepare_out_dir(out_dir: Path, inputs: Sequence[Path], overwrite: bool) -> None:
    resolved = out_dir.resolve()
    for ckpt in inputs:
        if resolved == ckpt.resolve():
            raise SoupError(f"OUT_DIR {out_dir} is also an input; choose a new folder")
    if out_dir.exists():
        if not out_dir.is_dir():
            raise SoupError(f"OUT_DIR {out_dir} exists and is not a directory")
        if any(out_dir.iterdir()) and not overwrite:
            raise SoupError(f"OUT_DIR {out_dir} exists and is not empty; pass --overwrite or choose a new folder")


def soup_checkpoints(inputs: Sequence[Path | str], out_dir: Path | str, overwrite: bool = False) -> SoupSummary:
    """Write the uniform average of ``inputs`` (N >= 2 checkpoint folders) to ``out_dir``.

    Everything is checked before anything is written. The result is assembled in a temporary sibling
    folder and moved into place at the end, so a failure never leaves a half-written OUT_DIR.
    """
    inputs = [Path(p) for p in inputs]
    out_dir = Path(out_dir)
    if len(inputs) < 2:
        raise SoupError(f"soup needs at least 2 checkpoints, got {len(inputs)}")
    for ckpt in inputs:
        if not ckpt.is_dir():
            read_layout(ckpt)  # its one-line error
    _prepare_out_dir(out_dir, inputs, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    merged_root = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.merged-", dir=out_dir.parent))
    try:
        return _soup(_merge_adapters(inputs, merged_root), out_dir)
    finally:
        shutil.rmtree(merged_root, ignore_errors=True)


def _merge_adapters(inputs: Sequence[Path], root: Path) -> list[Path]:
    """Each LoRA adapter folder among ``inputs`` replaced by its merge onto its base model (under ``root``)."""
    from olmocr_rl.model.adapters import AdapterError, is_adapter_folder, write_merged

    out = []
    for index, ckpt in enumerate(inputs):
        if not is_adapter_folder(ckpt) or (ckpt / "config.json").is_file():
            out.append(ckpt)
            continue
        print(f"soup: merging the LoRA adapter {ckpt} onto its base model", file=sys.stderr, flush=True)
        try:
            out.append(write_merged(ckpt, root / f"input-{index}"))
        except (AdapterError, OSError, ValueError) as err:
            raise SoupError(f"{ckpt}: {err}") from None
    return out


def _soup(inputs: Sequence[Path], out_dir: Path) -> SoupSummary:
    layouts = [read_layout(ckpt) for ckpt in inputs]
    configs = [_read_config(ckpt) for ckpt in inputs]
    check_compatible(layouts, configs)

    ref = layouts[0]
    rename = _bin_to_safetensors_name if ref.weight_format == "bin" else (lambda name: name)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.soup-", dir=out_dir.parent))
    try:
        num_tensors = 0
        for name, specs in ref.files.items():
            reader = _Reader(layouts, name)
            averaged = {}
            for spec in specs:
                averaged[spec.name] = average_tensors(reader.get(spec.name), spec.name)
                num_tensors += 1
            del reader
            metadata = ref.metadata.get(name) or {"format": "pt"}
            save_file(averaged, staging / rename(name), metadata=metadata)
            del averaged

        copied, dropped = [], []
        skip = set(ref.files) | ({ref.index_name} if ref.index_name else set())
        for path in sorted(ref.path.iterdir()):
            if path.name in skip:
                continue
            if path.is_dir() or _is_training_state(path.name) or _is_stale_weights(path.name):
                dropped.append(path.name + ("/" if path.is_dir() else ""))
                continue
            shutil.copy2(path, staging / path.name)
            copied.append(path.name)
        if ref.index_name is not None:
            _write_index(ref, staging, rename)

        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return SoupSummary(out_dir, [rename(n) for n in ref.files], num_tensors, copied, dropped)


def _write_index(ref: CheckpointLayout, staging: Path, rename) -> None:
    index = json.loads((ref.path / ref.index_name).read_text())
    index["weight_map"] = {tensor: rename(shard) for tensor, shard in index["weight_map"].items()}
    (staging / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m olmocr_rl.soup",
        description=(
            "Uniform weight average ('model soup') of N>=2 Hugging Face checkpoints of the same model, "
            "the step olmOCR 2 used to merge its RL runs. Tensors are accumulated in fp32 and cast back "
            "to their stored dtype, streamed one at a time (peak memory about one model in fp32). "
            "A LoRA adapter folder (adapter_config.json) is merged onto its base model first. "
            "Local folders only: download s3:// checkpoints first."
        ),
        epilog=(
            "Refuses (one-line error, nothing written) inputs whose config.json architectures/model_type, "
            "weight files, tensor names, shapes or dtypes differ. Optimizer, scheduler, RNG and trainer "
            "state are dropped; config, generation config and tokenizer/processor files are copied from "
            "the first checkpoint. Output is safetensors with the first input's sharding."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="CKPT_DIR... OUT_DIR: two or more local checkpoint (or LoRA adapter) folders, then the output folder",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT_DIR if it exists and is not empty (default: refuse)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    *inputs, out_dir = args.paths
    for path in [*inputs, out_dir]:
        if "://" in path:
            parser.exit(2, f"soup: error: {path}: only local folders are supported; download it first\n")
    try:
        summary = soup_checkpoints(inputs, out_dir, overwrite=args.overwrite)
    except SoupError as err:
        parser.exit(2, f"soup: error: {err}\n")
    print(
        f"soup: averaged {len(inputs)} checkpoints ({summary.num_tensors} tensors in "
        f"{len(summary.weight_files)} file(s)) into {summary.out_dir}"
    )
    print(f"soup: copied from {inputs[0]}: {', '.join(summary.copied) or 'nothing'}")
    if summary.dropped:
        print(f"soup: dropped (training state): {', '.join(summary.dropped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
