"""``python -m olmocr_rl.recipe``: the whole CPU recipe, stage by stage (docs/recipe.md)."""

import sys

from .run import main

sys.exit(main())
