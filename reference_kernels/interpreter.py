"""Triton's CPU interpreter, without re-patching ``triton.language`` at every helper call.

Under ``TRITON_INTERPRET=1`` a launch patches ``triton.language`` for the interpreter and keeps it
patched until it returns (``GridExecutor.__call__``). Every call of a ``@triton.jit`` helper
from inside the running kernel patches the same modules again (``InterpretedFunction.__call__``
calls ``_patch_lang``, an ``inspect.getmembers`` over four modules). The reference kernels'
column steps are built of such helpers, several calls a column, so the re-patching was about half
of an interpreted call (docs/reports.md, "CI regression report", session 53). :func:`install` lets
a helper call inside a launch reuse the launch's patch when the helper sees the same language
modules; the arithmetic is untouched, and the launch's own patch is still made, and restored when
it returns, exactly as before.

Private names relied on, in the triton releases of ``VERIFIED`` (checked against their source, and
by tests/test_interpreter.py in CI under each; other releases are left alone, and run as slowly
as before):
``triton.runtime.interpreter._patch_lang``, which the launch and the helper calls look up in their
module at each call, ``_LangPatchScope``, and ``GridExecutor.__call__``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import triton

__all__ = ["INSTALLED_MARK", "VERIFIED", "install"]

VERIFIED = ("3.6.", "3.9.")  # release prefixes whose interpreter this was checked against

INSTALLED_MARK = "_qrbench_reuses_the_launchs_patch"  # set on the installed _patch_lang


def _languages(fn: Callable[..., Any]) -> frozenset[int]:
    """The ``triton.language`` modules (by id) a jit function's globals bind, as ``_patch_lang``
    finds them."""
    import triton.language as tl

    return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))


def install() -> bool:
    """Make helper calls inside an interpreted launch reuse the launch's patch of the language.
    Does nothing (False) unless the interpreter is on under a ``VERIFIED`` triton; True once installed."""
    if os.environ.get("TRITON_INTERPRET") != "1" or not triton.__version__.startswith(VERIFIED):
        return False
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang
    if getattr(patch_lang, INSTALLED_MARK, False):
        return True
    run_grid = interpreter.GridExecutor.__call__
    patched: set[int] = set()  # the languages the running launch has patched (empty between launches)

    def reusing_patch_lang(fn: Callable[..., Any]) -> Any:
        languages = _languages(fn)
        if patched and languages <= patched:  # a helper inside the launch: already patched
            return interpreter._LangPatchScope()  # nothing of its own to restore
        scope = patch_lang(fn)
        patched.update(languages)
        return scope

    def grid_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        patched.clear()
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            patched.clear()  # the launch restored the language: the next one patches it anew

    setattr(reusing_patch_lang, INSTALLED_MARK, True)
    interpreter._patch_lang = reusing_patch_lang
    interpreter.GridExecutor.__call__ = grid_call
    return True
