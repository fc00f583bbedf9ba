"""``python -m evaluator`` is ``qrbench``, for checkouts without an install step."""

import sys

from evaluator.cli import main

sys.exit(main())
