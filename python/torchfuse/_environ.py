"""os.environ's changes, made where no compile of torchfuse's reads the environment.

getenv walks an array that setenv and unsetenv replace and free, and NVRTC reads about ten
variables in each compile on torchfuse's compile threads while Python runs. A change of
os.environ meanwhile (mock.patch.dict(os.environ, ...) unsets and sets every variable as it
exits) can crash the process there. While torchfuse is imported, os.putenv and os.unsetenv,
which os.environ calls, make their change once no compile is in flight, and compiles asked for
meanwhile wait for it (common/env.h); the GIL is released while they wait. They accept and
refuse what os.putenv and os.unsetenv do. Calls of setenv from C or C++ code are not covered.
"""
import os

from . import _C

_real = {}


def _encoded(text):
    text = os.fsencode(text)
    if b"\0" in text:
        raise ValueError("embedded null byte")
    return text


def _check(err):
    if err:
        raise OSError(err, os.strerror(err))


def putenv(key, value, /):
    """os.putenv, made once no compile of torchfuse's reads the environment."""
    key, value = _encoded(key), _encoded(value)
    if b"=" in key:
        raise ValueError("illegal environment variable name")
    _check(_C.set_environment(key, value))  # an empty name: setenv's EINVAL


def unsetenv(key, /):
    """os.unsetenv, made once no compile of torchfuse's reads the environment."""
    _check(_C.unset_environment(_encoded(key)))  # empty, or with "=": unsetenv's EINVAL


def install():
    """Routes os.putenv and os.unsetenv (and so os.environ's changes) through the gate, once,
    where they are still the os module's own (another library's replacements stay)."""
    import posix
    if os.putenv is not getattr(posix, "putenv", None) or \
            os.unsetenv is not getattr(posix, "unsetenv", None):
        return
    _real["putenv"], _real["unsetenv"] = os.putenv, os.unsetenv
    os.putenv, os.unsetenv = putenv, unsetenv


def uninstall():
    """Puts back the os module's own functions."""
    if os.putenv is putenv:
        os.putenv, os.unsetenv = _real["putenv"], _real["unsetenv"]
