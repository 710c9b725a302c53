"""Worker side: compiled extensions cached by a hash of what goes into the build.

``load_inline`` / ``load`` are wrapped before the candidate is imported, so that a second scan of
the same source does not recompile (35-45 s here, about a minute on the GPU machine), and so that
parallel workers never share a build folder or an extension name: the build folder is
``<cache>/ext/<hash>`` and the name gets the hash as a suffix (unless the source spells its own
``PYBIND11_MODULE`` name, which a rename would break).  In a sandbox (single-use, nothing shared)
the folder is laid out as torch's default one and the names are the candidate's own
(``plain_dir``).  The time spent inside these calls is
recorded, so that the dynamic stage's cost can be reported without compilation.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_OWN_MODULE_NAME = re.compile(r"PYBIND11_MODULE\s*\(\s*(?!TORCH_EXTENSION_NAME\b)\w+")


def default_cache_dir() -> Path:
    base = os.environ.get("HACKSCAN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hackscan")
    return Path(base)


# the end of a build error kept for a replay: torch's message carries the compiler's output
MAX_ERROR_CHARS = 200_000


class ExtensionCache:
    def __init__(self, root: Path, on_event: Callable[[dict[str, Any]], None] | None = None,
                 known_failures: dict[str, str] | None = None, plain_dir: Path | None = None):
        self.root = Path(root)
        # a sandboxed worker's own build folder, laid out as torch's default one
        # (``~/.cache/torch_extensions/py311_cpu/<name>``), with the candidate's own extension
        # names: a hash in a build folder's or a module's name tells a candidate it is checked.
        # The sandbox is single-use, so no other worker shares its names; None: the shared
        # layout (``<root>/ext/<hash>``, names with the hash appended), for --sandbox off
        self.plain_dir = Path(plain_dir) if plain_dir else None
        # name -> build key, for the plain layout: a second build of one name with other
        # sources or flags gets ``<name>_v1``, ``_v2``, ... as torch's own versioning names it
        self._plain_names: dict[str, str] = {}
        # build key -> torch's error message, for builds that already failed in the build farm
        # (dynamic/farm.py) with these same arguments, sources and compiler flags: raised again
        # as torch raised it, instead of compiling again on the device's time
        self.known_failures = dict(known_failures or {})
        self.compile_seconds = 0.0
        self.builds: list[dict[str, Any]] = []
        # builds of CUDA code: on a CPU worker the candidate's custom path cannot be what runs
        self.cuda_builds = 0
        # tells the parent a build started / ended, so its time limit can allow for compilation
        self.on_event = on_event
        # calls into the functions of every extension module built through here: the only way to
        # see on the CPU (no kernel census there) whether the candidate's own code ran at all
        self.calls = 0
        self.loaded: list[str] = []
        # modules that also export classes: calls to their methods are not counted, so a count of
        # zero does not prove that nothing of them ran
        self.partial: list[str] = []
        # (module, attribute, original function) of every wrapper, for uncount()
        self._wrapped: list[tuple[Any, str, Any, Any]] = []

    def _key(self, kind: str, args: dict[str, Any]) -> str:
        import torch

        h = hashlib.sha256()
        h.update(f"{kind}|{torch.__version__}|{sys.version_info[:2]}|".encode())
        for k in sorted(args):
            v = args[k]
            if k == "sources":
                v = [_read(s) for s in ([v] if isinstance(v, str) else list(v or []))]
            h.update(f"{k}={v!r}|".encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:20]

    def wrap(self, kind: str, original: Callable[..., Any], params: list[str]) -> Callable[..., Any]:
        cache = self

        def cached(*args: Any, **kwargs: Any) -> Any:
            bound = dict(zip(params, args, strict=False))
            bound.update(kwargs)
            name = str(bound.get("name", "ext"))
            key = cache._key(kind, {k: v for k, v in bound.items()
                                    if k not in ("verbose", "build_directory", "keep_intermediates")})
            text = " ".join(_read(s) for s in _sources_of(kind, bound))
            own_name = bool(_OWN_MODULE_NAME.search(text))
            if cache.plain_dir is not None:
                plain = cache.plain_name(name, key) if not own_name else name
                folder = cache.plain_dir / plain
                bound["name"] = plain
            else:
                folder = cache.root / "ext" / key
                if not own_name:
                    bound["name"] = f"{name}_{key[:12]}"
            folder.mkdir(parents=True, exist_ok=True)
            if (kind == "load_inline" and bound.get("cuda_sources")) or any(
                    str(x).endswith((".cu", ".cuh")) for x in _sources_of(kind, bound)) or "__global__" in text:
                cache.cuda_builds += 1
            bound["build_directory"] = str(folder)
            bound["verbose"] = False
            if kind == "load":
                pinned = _pin_sources(folder, bound.get("sources"))
                if pinned is not None:
                    bound["sources"] = pinned
            failed = cache.known_failures.get(key)
            if failed is not None:
                cache.builds.append({"name": name, "key": key, "seconds": 0.0, "compiled": False,
                                     "replayed": True, "failed": True, "error": first_error_line(failed),
                                     "error_text": failed[-2000:]})
                raise RuntimeError(failed)
            _clear_stale_lock(folder)
            # whether this call compiled anything: the shared object is new or rewritten (ninja
            # relinks it whenever a source or a flag changed); unchanged means a cache hit
            before = _library_stamps(folder)
            start = time.perf_counter()
            if cache.on_event is not None:
                cache.on_event({"build": "start", "name": name, "key": key, "at": time.monotonic()})
            record: dict[str, Any] = {"name": name, "key": key}
            try:
                module = original(**bound)
            except BaseException as exc:
                # a candidate may catch this and run torch instead: the parent reports the build
                # failure from this record whatever the candidate does with the exception
                # (``error``, the first compiler error line); the build farm replays the whole
                # text (``error_text``) at the same call in the real worker
                record.update(failed=True, error=first_error_line(str(exc)), error_type=type(exc).__name__,
                              error_text=str(exc)[-MAX_ERROR_CHARS:])
                raise
            finally:
                spent = time.perf_counter() - start
                cache.compile_seconds += spent
                after = _library_stamps(folder)
                record.update(seconds=round(spent, 3), compiled=bool(after) and after != before)
                cache.builds.append(record)
                if cache.on_event is not None:
                    cache.on_event({"build": "end", "name": name, "seconds": round(spent, 3),
                                    "at": time.monotonic()})
            return cache.count_calls(module, name)

        # torch's own name, module, docstring and signature (``inspect.signature`` follows
        # ``__wrapped__``): a wrapper named ``ExtensionCache.wrap.<locals>.cached`` tells a
        # candidate that something stands between it and torch
        import functools

        return functools.wraps(original)(cached)

    def plain_name(self, name: str, key: str) -> str:
        """The module (and folder) name of a build in the plain layout: the candidate's own, or
        ``<name>_v<N>`` when this process already built that name from other arguments."""
        for n in range(1000):
            candidate = name if n == 0 else f"{name}_v{n}"
            if self._plain_names.setdefault(candidate, key) == key:
                return candidate
        return f"{name}_{key[:12]}"

    def count_calls(self, module: Any, name: str) -> Any:
        """Count calls into the functions a built extension module exports.

        pybind11 functions are builtins whose attributes cannot be changed, so each is replaced on
        the module by a Python function that counts and calls it (``functools.wraps`` keeps its
        name and docstring).  Classes an extension exports are left alone: a wrapper would break
        ``isinstance``.
        """
        import functools
        import types

        if not isinstance(module, types.ModuleType):
            return module  # ``is_python_module=False``: its ops show in the op census instead
        cache = self
        for attr in list(vars(module)):
            fn = vars(module)[attr]
            if isinstance(fn, type) and not attr.startswith("__") and name not in self.partial:
                self.partial.append(name)
            if attr.startswith("__") or not isinstance(fn, types.BuiltinFunctionType):
                continue

            def counted(*args: Any, _fn: Any = fn, **kwargs: Any) -> Any:
                cache.calls += 1
                return _fn(*args, **kwargs)

            wrapper = functools.wraps(fn)(counted)
            try:
                setattr(module, attr, wrapper)
            except (AttributeError, TypeError):
                continue
            self._wrapped.append((module, attr, fn, wrapper))
        self.loaded.append(name)
        return module

    def uncount(self) -> None:
        """Put the extensions' own functions back (before timing: the wrapper costs about half a
        microsecond per call on a busy CPU).  A reference the candidate took to a wrapper stays
        one; one it replaced itself is left alone."""
        for module, attr, fn, wrapper in self._wrapped:
            if getattr(module, attr, None) is wrapper:
                setattr(module, attr, fn)
        self._wrapped.clear()

    def install(self) -> None:
        """Replace the loaders in ``torch.utils.cpp_extension`` (before the candidate imports them)."""
        import inspect

        import torch.utils.cpp_extension as cpp

        for kind in ("load_inline", "load"):
            original = getattr(cpp, kind)
            params = list(inspect.signature(original).parameters)
            setattr(cpp, kind, self.wrap(kind, original, params))


STALE_LOCK_SECONDS = 900.0


def _library_stamps(folder: Path) -> dict[str, int]:
    """The shared objects of a build folder with their modification times (nanoseconds)."""
    try:
        return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.suffix == ".so"}
    except OSError:
        return {}


def _clear_stale_lock(folder: Path) -> None:
    """Remove torch's build lock when the worker that took it is gone.

    ``cpp_extension`` guards a build folder with a ``lock`` file and waits, forever, while it
    exists.  A worker killed mid-build (time limit, memory limit, Ctrl-C) leaves it behind, and every
    later scan of the same source would hang.  Each build records its worker's pid next to the lock;
    a lock whose owner no longer runs, or that has no owner and is older than a build can take, is
    stale.
    """
    lock = folder / "lock"
    owner_file = folder / "hackscan.owner"
    if lock.exists():
        stale = False
        try:
            owner = int(owner_file.read_text().strip())
        except (OSError, ValueError):
            owner = None
        if owner is not None and owner != os.getpid():
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                stale = True
            except PermissionError:
                pass
        elif owner is None:
            try:
                stale = time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS
            except OSError:
                stale = False
        if stale:
            try:
                lock.unlink()
            except OSError:
                pass
    if not lock.exists():
        try:
            owner_file.write_text(str(os.getpid()))
        except OSError:
            pass


_ERROR_LINE = re.compile(r"(?:^|\s)(?:fatal )?error\b\s*[:(]", re.I)
_PATH_PREFIX = re.compile(r"(?:/[^\s:/]+)+/([^\s:/]+:\d+)")


def first_error_line(text: str) -> str:
    """The first compiler error line of a failed build's output (torch's exception carries the
    ninja log), with the private build folder's path cut to the file name."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pick = next((ln for ln in lines if _ERROR_LINE.search(ln) and not ln.startswith(("FAILED:", "ninja:"))), None)
    if pick is None:
        pick = next((ln for ln in lines if ln.startswith("FAILED:")), lines[-1] if lines else "")
    return _PATH_PREFIX.sub(r"\1", pick)[:300]


def _sources_of(kind: str, bound: dict[str, Any]) -> list[Any]:
    if kind == "load_inline":
        out: list[Any] = []
        for key in ("cpp_sources", "cuda_sources"):
            v = bound.get(key)
            if isinstance(v, str):
                out.append(v)
            elif v:
                out.extend(v)
        return out
    v = bound.get("sources")
    return [v] if isinstance(v, str) else list(v or [])


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _pin_sources(folder: Path, sources: Any) -> list[str] | None:
    """``load(sources=[paths])``: the files copied to fixed paths inside the build folder.

    Candidates write their sources to the working directory and hand ``load`` relative paths.
    The build farm and the worker run in different working directories, and the worker writes the
    files again, so ninja saw new paths and newer sources and compiled a second time, on the GPU's
    time (57 s under the device's gate, measured, for a build the farm had just made).  The
    build key already covers the files' contents, so copies at ``<build folder>/src/`` are the same
    paths in every process that builds the same key; a copy is rewritten only when its content
    differs, so its modification time (what ninja compares) stays the farm's.  Sources that include
    a file beside them with ``#include "..."`` are left where they are: moved, the include would
    not resolve.  None when nothing is pinned.
    """
    paths = [sources] if isinstance(sources, str) else list(sources or []) if isinstance(sources, (list, tuple)) else None
    if not paths:
        return None
    texts: list[bytes] = []
    for src in paths:
        path = Path(str(src))
        try:
            data = path.read_bytes()
        except OSError:
            return None
        for inc in _QUOTED_INCLUDE.findall(data.decode("utf-8", "replace")):
            if (path.parent / inc).exists():
                return None
        texts.append(data)
    names = [Path(str(src)).name for src in paths]
    if len(set(names)) != len(names):
        return None  # torch names objects by file name: two sources of one name clash anyway
    out: list[str] = []
    target_dir = folder / "src"
    target_dir.mkdir(parents=True, exist_ok=True)
    for name, data in zip(names, texts, strict=True):
        target = target_dir / name
        try:
            same = target.read_bytes() == data
        except OSError:
            same = False
        if not same:
            target.write_bytes(data)
        out.append(str(target))
    return out


def _read(src: Any) -> str:
    """A source string, or the text of a source file (``load(sources=[path])``)."""
    s = str(src)
    if len(s) < 4096 and "\n" not in s and s.endswith((".cpp", ".cu", ".cc", ".cxx", ".c", ".cuh", ".h")):
        try:
            return Path(s).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return s
    return s
