#!/usr/bin/env python3
"""`bench/run.py` = `python -m bench`, runnable from anywhere."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import main  # noqa: E402

sys.exit(main())
