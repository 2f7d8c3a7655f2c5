"""The recipe on a CPU: olmOCR 2's claim reproduced with a small model (docs/recipe.md).

Modules:

- ``grid``: the print grid (:class:`~.grid.PrintGrid`): type size and margins that put every character on one
  vision patch of the model's image, computed from ``--target_longest_image_dim``; :func:`~.grid.measure_alignment`
  checks a printed page;
- ``words``: pseudo-words and numbers, split into disjoint train and held-out pools;
- ``layout``: the blocks of a page (paragraphs, headings, lists, tables, display math, two columns, footnotes) as
  HTML on the grid, with the lines each prints;
- ``compose``: the page kinds and what each page holds;
- ``pages``: ``python -m olmocr_rl.recipe.pages``, the generator (HTML pages and sidecars for synth);
- ``teacher``: ``python -m olmocr_rl.recipe.teacher``, a flawed teacher's transcripts of the pages (SFT data).
"""
