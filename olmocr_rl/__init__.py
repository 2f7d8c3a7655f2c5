"""olmocr_rl: GRPO / OlmoRL fine-tuning of vision-language OCR models with olmOCR-bench unit-test rewards."""

__version__ = "0.1.0"
