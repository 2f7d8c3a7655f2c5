"""HTML pages → an olmOCR-bench folder, every test checked on its own page (``python -m olmocr_rl.synth``).

The layer above ``bench`` and ``data``: it reuses the bench loader and scorer, and ``data.references``' rule for
where references live. Modules, in the order a page goes through them:

- ``tree``: the HTML as a small tree (stdlib ``html.parser``), math found, page furniture marked;
- ``content``: body blocks in reading order, tables on a grid, the furniture lines;
- ``reference``: the reference transcription (front matter, markdown, tables as HTML);
- ``derive``: candidate tests, one rule per type;
- ``render``: headless Chromium through Playwright, KaTeX, one-page PDFs with fixed dates;
- ``guarantee``: the checks every written test passes (loader, own reference, not trivial, text layer);
- ``pipeline``: one page start to end; ``runner``: many pages, 1 or N processes;
- ``output``: the folder (plan, shards, whole writes, JSONL, manifest, merge, the post-condition);
- ``server``: the page → HTML half (an OpenAI-compatible VLM server writes the HTML);
- ``cli``: the command. docs/synth.md documents the rules and the guarantee.
"""
