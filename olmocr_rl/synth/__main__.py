"""``python -m olmocr_rl.synth``: see :mod:`olmocr_rl.synth.cli`."""

from olmocr_rl.synth.cli import main

raise SystemExit(main())
