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


def _trials(text):
    """A record's trials, "variant=ms;variant=error", as a list of dicts."""
    out = []
    for part in filter(None, text.split(";")):
        variant, _, outcome = part.partition("=")
        try:
            out.append({"variant": variant, "ms": float(outcome)})
        except ValueError:
            out.append({"variant": variant, "error": outcome})
    return out


def ls(cache_dir=None, as_text=False):
    """The cache's entries: dicts with type ("tuning" or "binary"), kernel, bucket, gpu, arch,
    variant, ms, tuned, path, problem, and for tuning records the tuning run's trials (a list
    of {"variant", "ms"} or {"variant", "error"}, the heuristic's variant first; empty for an
    untuned record) and phases (where its time went: "compile=...ms check=...ms timing=...ms",
    and "runoff=N rounds of K" where the runoff ran); the `torchfuse cache ls` table with
    as_text."""
    if as_text:
        return _C.cache_ls(_opts(cache_dir))
    out = []
    for e in _C.cache_entries(_opts(cache_dir)):
        e = dict(e)
        e["arch"] = int(e["arch"])
        e["ms"] = float(e["ms"])
        e["tuned"] = e["tuned"] == "1"
        e["trials"] = _trials(e.get("trials", ""))
        out.append(e)
    return out


def clear(cache_dir=None):
    """Removes every entry."""
    _C.cache_clear(_opts(cache_dir))


def rebuild(cache_dir=None, arch=None):
    """Re-compiles and re-tunes every recorded kernel on this GPU (without one, re-compiles the
    binaries, for `arch` if given); returns the report."""
    return _C.cache_rebuild(_opts(cache_dir), arch or "")


def export(file, cache_dir=None):
    """Packs every binary and tuning record, with their checksums, into the tar file `file`
    (`torchfuse cache export`); returns what it packed."""
    return _C.cache_export(_opts(cache_dir), str(file))


def import_(file, cache_dir=None):
    """Checks the tar file `file` whole (paths inside the cache, this cache format version,
    every checksum), then unpacks it into the cache (`torchfuse cache import`); raises
    RuntimeError for an archive it refuses, having written nothing. Returns what it unpacked."""
    return _C.cache_import(_opts(cache_dir), str(file))
