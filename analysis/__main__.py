"""python -m analysis runs/ --out analysis/out: collect + tables + figures (see analysis.figures)."""

import sys

from .figures import main

sys.exit(main())
