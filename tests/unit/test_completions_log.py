"""The completions table's text for page prompts (olmocr_rl.trainer.completions); the CLI runs are in test_cli_e2e."""

from __future__ import annotations


from olmocr_rl.trainer.completions import conversation_text, log_page_column
from olmocr_rl.trainer.plain import PlainGRPOTrainer
from olmocr_rl.trainer.olmorl import OlmoRLGRPOTrainer


def test_a_page_prompt_becomes_its_text_with_an_image_marker():
    prompt = [{"role": "user", "content": [{"type": "text", "text": "Read this page."}, {"type": "image"}]}]
    assert conversation_text(prompt) == "Read this page.\n<image>"
    # as TRL keeps it after generation: the image part still holding the page
    with_image = [{"role": "user", "content": [{"type": "image", "image": object()}, {"type": "text", "text": "x"}]}]
    assert conversation_text(with_image) == "<image>\nx"


def test_a_completion_becomes_its_text():
    assert conversation_text([{"role": "assistant", "content": "---\nprimary_language: en\n---\nHello"}]) == (
        "---\nprimary_language: en\n---\nHello"
    )
    assert conversation_text("plain completion") == "plain completion"
    assert conversation_text([]) == ""  # no messages
    assert conversation_text(["a"]) == "['a']"  # not a conversation: as str() writes it


def test_several_messages_are_labelled_by_role():
    conversation = [{"role": "system", "content": "Be exact."},
                    {"role": "user", "content": [{"type": "text", "text": "Page:"}, {"type": "image"}]}]
    assert conversation_text(conversation) == "system: Be exact.\n\nuser: Page:\n<image>"


def test_the_page_column_names_pages_as_the_page_filters_do():
    """The dataset's own page name (page_key of the PDF below pdfs/), whatever folders lie above."""

    class Trainer:
        log_completions = True

        def _log_completion_extra(self, column, values):
            self.extra = (column, values)

    trainer = Trainer()
    inputs = [{"pdf": "counting.pdf", "pdf_path": "/data/pdfs/bench/pdfs/counting.pdf", "page": 2},
              {"pdf": "sub/pdfs/a.pdf", "pdf_path": "/b/pdfs/sub/pdfs/a.pdf", "page": 1}]
    log_page_column(trainer, inputs)
    assert trainer.extra == ("page", ["counting.pdf:2", "sub/pdfs/a.pdf:1"])


def test_both_trainers_log_the_table_through_the_trainer_class():
    import inspect

    for trainer_cls in (PlainGRPOTrainer, OlmoRLGRPOTrainer):
        # the trainer class's log and _calculate_rewards convert the table before TRL's run
        assert trainer_cls.log is PlainGRPOTrainer.log
        assert trainer_cls._calculate_rewards is PlainGRPOTrainer._calculate_rewards
    assert "table_as_text" in inspect.getsource(PlainGRPOTrainer.log)
    assert "log_page_column" in inspect.getsource(PlainGRPOTrainer._calculate_rewards)
