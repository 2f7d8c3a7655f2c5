"""Property tests of python -m olmocr_rl.synth with the real browser: random report pages (hypothesis; running
head and foot, headings, paragraphs with bold/italic/<br>/inline math/footnote markers, addresses broken by
<br>, lists, tables with row and column spans, display math, CSS columns, flex and grid columns, footnotes)
are printed one browser session, and every test written for a page passes on a transcription made from that
page's own text layer (its printed lines, the running head and foot left out), not only on the reference:
present/absent/order tests are scored on it under both rules; the other types need markup a text layer does
not carry (a heading, a table, LaTeX), so their strings must be in it with their word boundaries (a table
cell's words with at most a few words of the cells beside it between them: the text layer merges one printed
line left to right, across cells). No such page
is skipped as not shown: what these pages hold is what they print. The shipped pages and the <br> letter are
held to the same property. Skips with the set-up line where the browser, KaTeX or Playwright is missing.

Size: EXAMPLES pages, fixed (derandomized) so CI sees the same ones; scripts-free, ~0.25 s a page."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from conftest import REPO_ROOT
from olmocr_rl.bench import evaluate_page, load_single_test
from olmocr_rl.bench.prepared import SCORING_RULES
from olmocr_rl.synth.content import page_content
from olmocr_rl.synth.pipeline import PageJob, PageOptions, PageResult, make_page, pdf_text_layer
from olmocr_rl.synth.render import BrowserMissingError, Renderer, check_setup
from olmocr_rl.synth.shown import plain
from olmocr_rl.synth.tree import parse_html
from synth_helpers import layer_transcription, random_page

EXAMPLES = 40
TEXT_TYPES = ("present", "absent", "order")
STRINGS = ("text", "cell", "up", "down", "left", "right", "top_heading", "left_heading", "appears_before_marker")
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "synth"


@pytest.fixture(scope="module")
def renderer():
    try:
        check_setup()
    except BrowserMissingError as error:
        pytest.skip(str(error))
    with Renderer(20) as browser:
        yield browser


def _check_on_own_layer(html_path: Path, furniture: list[str] | None, renderer, seed: int = 0) -> PageResult | str:
    """The page made, and each written test checked on the transcription of its own text layer; or the skip kind."""
    job = PageJob(str(html_path), html_path.name, "t", f"t/{html_path.stem}.pdf", f"t_{html_path.stem}")
    result = make_page(job, PageOptions(seed=seed), renderer)
    if not isinstance(result, PageResult):
        assert result.kind in ("no_tests", "too_long"), (result.kind, result.reason, html_path.read_text())
        return result.kind
    if furniture is None:
        furniture = page_content(parse_html(html_path.read_text())).furniture
    transcription = layer_transcription(pdf_text_layer(result.pdf)[1], furniture)
    words = plain(transcription).split()
    for data in result.tests:
        if data["type"] in TEXT_TYPES:
            test = load_single_test(data)
            for rule in SCORING_RULES:
                passed, why = evaluate_page([test], transcription, rule)[0][1:]
                assert passed, (data, rule, why, transcription, html_path.read_text())
            continue
        for name in STRINGS:  # a table's cells: a few words of the cells beside may stand between (same line);
            if data.get(name):  # a footnote's words before the marker: the last one printed with the marker on it
                wanted = plain(data[name]).split()
                if data["type"] == "footnote":
                    wanted[-1] = (wanted[-1], wanted[-1] + data["marker"])
                assert _in_words(wanted, words, 8 if data["type"] == "table" else 0), (data, name, transcription)
    return result


def _in_words(wanted: list, words: list[str], gap: int) -> bool:
    """``wanted`` among ``words`` in order, whole words (a tuple: any of its words), at most ``gap`` other words
    between two of them."""
    def same(word: str, want) -> bool:
        return word in want if isinstance(want, tuple) else word == want

    for start, word in enumerate(words):
        if not same(word, wanted[0]):
            continue
        at, found = start, 1
        while found < len(wanted):
            nxt = next((i for i in range(at + 1, min(len(words), at + 2 + gap)) if same(words[i], wanted[found])),
                       None)
            if nxt is None:
                break
            at, found = nxt, found + 1
        if found == len(wanted):
            return True
    return False


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(page=random_page())
def test_random_pages_every_test_passes_on_its_own_text_layer(renderer, tmp_path_factory, page):
    html, furniture = page
    path = tmp_path_factory.mktemp("page") / "page.html"
    path.write_text(html, encoding="utf-8")
    _check_on_own_layer(path, furniture, renderer)


@pytest.mark.parametrize("page", sorted((FIXTURES / "pages").glob("*.html")) + [FIXTURES / "letter" / "letter.html"],
                         ids=lambda p: p.name)
def test_the_shipped_pages_and_the_letter_pass_on_their_own_text_layer(renderer, page):
    result = _check_on_own_layer(page, None, renderer)
    assert isinstance(result, PageResult) and result.tests
