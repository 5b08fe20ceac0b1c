"""The on-disk cache of kernel binaries and tuning records.

The directory is cache_dir if given, else $TORCHFUSE_CACHE_DIR, else $XDG_CACHE_HOME/torchfuse,
else ~/.cache/torchfuse.
"""
from . import _C


def _opts(cache_dir):
    return "" if cache_dir is None else f"cache_dir={cache_dir}"


def path(cache_dir=None):
    """The cache directory."""
    return _C.cache_path(_opts(cache_dir))


def ls(cache_dir=None, as_text=False):
    """The cache's entries: dicts with type ("tuning" or "binary"), kernel, bucket, gpu, arch,
    variant, ms, tuned, path and problem; the `torchfuse cache ls` table with as_text."""
    if as_text:
        return _C.cache_ls(_opts(cache_dir))
    out = []
    for e in _C.cache_entries(_opts(cache_dir)):
        e = dict(e)
        e["arch"] = int(e["arch"])
        e["ms"] = float(e["ms"])
        e["tuned"] = e["tuned"] == "1"
        out.append(e)
    return out


def clear(cache_dir=None):
    """Removes every entry."""
    _C.cache_clear(_opts(cache_dir))


def rebuild(cache_dir=None, arch=None):
    """Re-compiles and re-tunes every recorded kernel on this GPU (without one, re-compiles the
    binaries, for `arch` if given); returns the report."""
    return _C.cache_rebuild(_opts(cache_dir), arch or "")
