"""Page images turned into pixel values once per page per step, not once per copy (``--share_page_processing``).

A GRPO generation batch holds G copies of each page prompt, and TRL 1.16 runs the processor over the
whole batch twice per step: once to tokenize the prompts for generation, once to build the training
forward's ``pixel_values``: the image processor would resize, normalise and patchify the same page 2·G
times (docs/gpu_check.md has the figures).

:func:`share_page_processing` wraps the processor's image step on the instance: within one call,
identical images (same mode, size and pixel bytes) are processed once and their patches repeated in
place; the distinct pages of the last call are kept, so the second call of the step (the same pages,
as tensors instead of arrays) reuses them. The image processor treats each image on its own (resize,
rescale, normalise, patchify), so the pixel values, grids and prompt tokens are exactly the stock
processor's: ``tests/unit/test_page_processing.py`` compares them with ``torch.equal``.

Only the processor's own call is touched (nothing is saved with it); images that are not PIL images,
or an image processor that returns more than ``pixel_values`` and ``image_grid_thw``, take the stock path.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["PageProcessingCache", "share_page_processing"]

_OUTPUT_KEYS = {"pixel_values", "image_grid_thw"}


def _image_key(image) -> tuple | None:
    """What makes two page images the same input: mode, size and the pixel bytes themselves (None: not PIL).

    The bytes are the key (no digest, so no collision can ever merge two pages): copying them out of a
    1288 px page costs ~5 ms and hashing them ~1 ms, against ~80 ms to process the page."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - PIL is a dependency of the image processors
        return None
    if not isinstance(image, Image.Image):
        return None
    return image.mode, image.size, image.tobytes()


def _concat(chunks: list):
    """Concatenate per-image arrays (NumPy) or tensors along the patch axis."""
    first = chunks[0]
    if hasattr(first, "new_empty"):  # a torch tensor
        import torch

        return torch.cat(chunks)
    import numpy as np

    return np.concatenate(chunks)


class PageProcessingCache:
    """The processed pages of the last processor call, keyed by image content and the call's image kwargs.

    ``hits`` / ``misses`` count images served from the cache / processed (read by the tests and the bench).
    """

    def __init__(self):
        self._pages: dict[tuple, tuple[Any, Any]] = {}
        self.hits = 0
        self.misses = 0

    def process(self, image_processor, images: list, keys: list[tuple], kwargs: dict):
        """``(pixel_values, image_grid_thw)`` of ``images`` in order (arrays or tensors as the processor returns
        them without ``return_tensors``), each distinct key processed at most once; None when the processor
        returns other outputs (the caller then takes the stock path)."""
        signature = repr(sorted((k, v) for k, v in kwargs.items() if k != "return_tensors"))
        wanted = [(key, signature) for key in keys]
        missing: dict[tuple, Any] = {}
        for index, entry in enumerate(wanted):
            if entry not in self._pages and entry not in missing:
                missing[entry] = images[index]
        if missing:
            call_kwargs = {k: v for k, v in kwargs.items() if k != "return_tensors"}
            out = image_processor(list(missing.values()), **call_kwargs)
            if set(out.keys()) != _OUTPUT_KEYS:
                return None
            grids = out["image_grid_thw"]
            offset = 0
            for position, entry in enumerate(missing):
                grid = grids[position]
                patches = int(grid[0]) * int(grid[1]) * int(grid[2])
                self._pages[entry] = (out["pixel_values"][offset:offset + patches], grid)
                offset += patches
        self.misses += len(missing)
        self.hits += len(wanted) - len(missing)
        pixel_values = _concat([self._pages[entry][0] for entry in wanted])
        grid_thw = _stack([self._pages[entry][1] for entry in wanted])
        self._pages = {entry: self._pages[entry] for entry in dict.fromkeys(wanted)}  # keep this call's pages only
        return pixel_values, grid_thw


def _stack(rows: list):
    first = rows[0]
    if hasattr(first, "new_empty"):
        import torch

        return torch.stack(rows)
    import numpy as np

    return np.stack(rows)


def share_page_processing(processor) -> PageProcessingCache | None:
    """Install the per-page processing on ``processor`` (a Qwen-VL-style processor with an image processor);
    returns its cache, or None where the processor has no image step this applies to."""
    if not hasattr(processor, "image_processor") or not hasattr(processor, "_process_images"):
        return None
    from transformers.feature_extraction_utils import BatchFeature
    from transformers.image_utils import make_flat_list_of_images

    cache = PageProcessingCache()
    stock = type(processor)._process_images

    def _process_images(self, images, **kwargs):
        flat = make_flat_list_of_images(images)
        keys = [_image_key(image) for image in flat]
        if not flat or any(key is None for key in keys):
            return stock(self, images, **kwargs)
        processed = cache.process(self.image_processor, flat, keys, kwargs)
        if processed is None:
            return stock(self, images, **kwargs)
        pixel_values, grid_thw = processed
        out = BatchFeature({"pixel_values": pixel_values, "image_grid_thw": grid_thw},
                           tensor_type=kwargs.get("return_tensors"))
        replacements = []
        if getattr(self, "image_token", None) is not None:
            replacements = [self.replace_image_token(out, image_idx=i, **kwargs) for i in range(len(flat))]
        return out, replacements

    # Bound to the instance; ProcessorMixin.to_dict saves only constructor arguments and sub-processors.
    processor._process_images = types.MethodType(_process_images, processor)
    return cache
