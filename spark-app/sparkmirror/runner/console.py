"""One quiet console for `sparkmirror run`: the progress table and the runner's own messages, nothing else.

Spark's JVM, its Python workers (the lanes' logs) and librdkafka (`%6|...|` lines) all write straight to file
descriptor 2, from this process and from the processes it starts, which inherit it. So the console is
quietened at the descriptor: while `QuietConsole` is active, descriptors 1 and 2 point at a log file and
`sys.stdout`/`sys.stderr` at the real terminal. Python logging goes to the same file. `-v` skips all this.
Nested (the demo quietens its own Kafka clients around `run`), the inner one uses the outer one's file.
"""
from __future__ import annotations

import datetime as dt
import io
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def default_log_path() -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.gettempdir()) / f"sparkmirror-run-{stamp}-{os.getpid()}.log"


class QuietConsole:
    """Context manager: native output (JVM, workers, librdkafka) and Python logging to `log_path`; `out`/`err`
    are the terminal's stdout and stderr, for the table and the runner's messages."""

    _active: "QuietConsole | None" = None  # the outermost one in this process

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.out: TextIO = sys.stdout
        self.err: TextIO = sys.stderr
        self._saved: dict[int, int] = {}
        self._streams: tuple[TextIO, TextIO] | None = None
        self._handler: logging.Handler | None = None
        self._root_handlers: list[logging.Handler] = []
        self._root_level = logging.WARNING

    def __enter__(self) -> "QuietConsole":
        outer = QuietConsole._active
        if outer is not None:
            self.log_path, self.out, self.err = outer.log_path, outer.out, outer.err
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # OSError: nothing changed yet
        QuietConsole._active = self
        try:
            for n in (1, 2):
                self._saved[n] = os.dup(n)
                os.dup2(fd, n)
        finally:
            os.close(fd)
        self._streams = (sys.stdout, sys.stderr)
        # the terminal, on copies of the original descriptors (line-buffered: the table is drawn line by line)
        self.out = io.TextIOWrapper(os.fdopen(self._saved[1], "wb", closefd=False), line_buffering=True,
                                    encoding=sys.stdout.encoding or "utf-8", errors="replace")
        self.err = io.TextIOWrapper(os.fdopen(self._saved[2], "wb", closefd=False), line_buffering=True,
                                    encoding=sys.stderr.encoding or "utf-8", errors="replace")
        sys.stdout, sys.stderr = self.out, self.err
        root = logging.getLogger()
        self._root_handlers, self._root_level = root.handlers[:], root.level
        self._handler = logging.FileHandler(self.log_path)
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.handlers = [self._handler]
        root.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        if QuietConsole._active is not self:
            return
        QuietConsole._active = None
        root = logging.getLogger()
        root.handlers, root.level = self._root_handlers, self._root_level
        if self._handler is not None:
            self._handler.close()
        for stream in (self.out, self.err):
            stream.flush()
        if self._streams is not None:
            sys.stdout, sys.stderr = self._streams
        for n, saved in self._saved.items():
            os.dup2(saved, n)  # the JVM keeps the log file: it inherited its own copy
            os.close(saved)
        self._saved.clear()
