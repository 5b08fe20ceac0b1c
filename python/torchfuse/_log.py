"""The `torchfuse` logger: what the package and its C++ library say.

Fallbacks (a graph or a node left to torch) are also `warnings`, once each. Everything else,
what was compiled, tuned and loaded from the cache, and the progress of a precompile, is a
message of the logger "torchfuse": INFO for steps, DEBUG for details (each NVRTC compile),
WARNING for problems (an unusable cache entry). Turn it up with
`logging.getLogger("torchfuse").setLevel(logging.INFO)` or TORCHFUSE_LOG=info|debug, which
also prints the messages on stderr when no handler is configured.
"""
import logging
import os
import sys
import threading

from . import _C

logger = logging.getLogger("torchfuse")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def _deliver(level, text):
    logger.log(level, text)


def _pump():
    while True:
        message = _C.next_log()
        if message is None:
            return
        _deliver(*message)


_thread = None


def start():
    """Routes the library's messages to the logger (at import)."""
    global _thread
    level = _LEVELS.get(os.environ.get("TORCHFUSE_LOG", "").lower())
    if level is not None:
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("torchfuse: %(message)s"))
            logger.addHandler(handler)
    _C.set_log_callback(_deliver)
    _thread = threading.Thread(target=_pump, name="torchfuse-log", daemon=True)
    _thread.start()


def stop():
    """At interpreter exit: the queued messages are delivered and the log thread ends."""
    _C.stop_logs()
    if _thread is not None:
        _thread.join(timeout=2)
