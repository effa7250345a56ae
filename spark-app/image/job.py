"""The Spark image's application file (`local:///opt/sparkmirror/job.py`): runs one flow group.

The exit code is passed on, so a mirror that fails ends its driver with a non-zero status and the Spark
operator reports the application FAILED (and restarts it) instead of COMPLETED.
"""
import sys

from sparkmirror.job import main

sys.exit(main())
