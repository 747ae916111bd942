"""Error types of tracekern and the helper that names the user's source line.

Every error raised while tracing says where in the user's code the offending value was made."""
from __future__ import annotations

import linecache
import os
import sys
import types

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_NUMPY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__import__("numpy").__file__)))


class TracekernError(Exception):
    """Base class of tracekern's own errors."""


class TracerBoolError(TypeError, TracekernError):
    """Python control flow asked for the concrete value of a traced array."""


class ShapeError(ValueError, TracekernError):
    """Shapes of operands do not fit the operation."""


class IRError(TracekernError):
    """A graph is malformed (raised by the verifier: an internal error, or a hand-built graph)."""


class TracerLeakError(TracekernError):
    """A traced value escaped the function being traced and was used afterwards."""


class GradientCheckError(AssertionError, TracekernError):
    """tk.check_grad found reverse mode and finite differences disagree."""


class MemoryBudgetError(ValueError, TracekernError):
    """memory_budget= is below the smallest residual bytes any plan can save; `smallest` is that
    figure (bytes), `requested` the budget asked for (bytes)."""

    def __init__(self, message: str, smallest: int, requested: int):
        super().__init__(message)
        self.smallest = smallest
        self.requested = requested


class CompileWarning(UserWarning):
    """A step's background compile failed (backends/tiers.py): the step keeps running on the NumPy
    tier, with the same results, slower. The message carries the compiler's error."""


class CacheWarning(UserWarning):
    """The disk cache directory was refused (another user could write to it): this process compiles
    into a private temporary directory instead. The message names the reason and the fix."""


# A module of the package that is itself user code (an example such as tracekern.demo) sets this
# module-level name to True: its lines are the ones errors and the IR name.
USER_CODE_MARKER = "__tracekern_user_code__"


# libraries whose functions call NumPy on their arguments: their frames are not the user's line, and
# an error raised inside them names the library function the user called (library_call)
_LIBRARIES = ("scipy",)


def _library(frame) -> str | None:
    """The library (of _LIBRARIES) a frame's code belongs to, or None."""
    module = frame.f_globals.get("__name__", "") or ""
    top = module.split(".", 1)[0]
    return top if top in _LIBRARIES else None


def _is_internal(frame) -> bool:
    names = frame.f_globals
    if names.get(USER_CODE_MARKER):   # (asked every time: a module may set it after its first frames ran)
        return False
    code, module = frame.f_code, names.get("__name__")
    known = _BY_CODE.get(id(code))   # (by id: a code object's hash walks its bytecode and constants each time)
    # (the very code object: code objects of the same text compare equal across files; and the module
    # name _library read)
    if known is not None and known[0] is code and known[1] is module:
        return known[2]
    filename = code.co_filename
    if filename.startswith("<frozen"):
        return True
    internal = _INTERNAL_FILES.get(filename)
    if _library(frame):
        internal = True
    elif internal is None:
        path = os.path.abspath(filename)
        internal = path.startswith(_PKG_DIR) or path.startswith(os.path.join(_NUMPY_DIR, "numpy"))
        if not os.path.isabs(filename):   # (a relative name depends on the working directory: not kept)
            return internal
        _INTERNAL_FILES[filename] = internal
    if len(_BY_CODE) >= 8192:
        _BY_CODE.clear()
    _BY_CODE[id(code)] = (code, module, internal)
    return internal


# absolute file name -> whether it is tracekern's or NumPy's: every traced operation walks the stack
# to the user's line, and abspath per frame was a third of the tracing time (a warm start traces)
_INTERNAL_FILES: dict[str, bool] = {}
# id of a code object -> (that very code object, its module's __name__, _is_internal's answer): seven frames an
# operation, the largest part of a warm start's trace for its plan key after the above. The user-code
# marker is read every time, and no module's globals are kept alive here
_BY_CODE: dict = {}


def library_call() -> str | None:
    """The public name of the library function (scipy.special.logsumexp) the user's innermost line
    called, when the stack runs through one (_LIBRARIES), else None. A decorator's closure (SciPy wraps
    scipy.linalg.cho_factor in a `wrapper`) is not the name the user called: the function it wraps is."""
    frame, outer = sys._getframe(1), None
    while frame is not None and _is_internal(frame):
        if _library(frame):
            outer = frame
        frame = frame.f_back
    if outer is None:
        return None
    module, name = outer.f_globals.get("__name__", "") or "", outer.f_code.co_name
    if "<locals>" in outer.f_code.co_qualname:
        for free in outer.f_code.co_freevars:
            wrapped = outer.f_locals.get(free)
            if isinstance(wrapped, types.FunctionType) and (wrapped.__module__ or "").split(".")[0] in _LIBRARIES:
                module, name = wrapped.__module__, wrapped.__name__
                break
    parts = []
    for part in module.split("."):
        if part.startswith("_"):
            break
        parts.append(part)
    return ".".join(parts + [name])


def numpy_call() -> str | None:
    """The name of the NumPy function the user's innermost line called, when the stack runs through
    NumPy's own Python code (np.full converting its fill value), else None."""
    frame, outer = sys._getframe(1), None
    while frame is not None and _is_internal(frame):
        module = frame.f_globals.get("__name__", "") or ""
        if module == "numpy" or module.startswith("numpy."):
            outer = frame
        frame = frame.f_back
    return None if outer is None else outer.f_code.co_name


def traced_fill_error(aval) -> TypeError:
    """np.full(shape, traced): NumPy converts the fill value to an array (or copies it into a NumPy
    array) before any dispatch, so the call never reaches tracekern."""
    return TypeError(with_location(
        f"np.full(shape, fill_value) with a traced fill value ({aval}) cannot be traced: NumPy copies the value into "
        "a NumPy array of its own, which needs the value. Write np.broadcast_to(value, shape) (add .astype(dtype) for "
        "dtype=), np.full_like(array, value), or np.full(shape, value, like=value)"))


def user_frame_location() -> str | None:
    """'file:line' of the innermost stack frame outside tracekern and NumPy, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def user_stacklevel() -> int:
    """warnings.warn's stacklevel, for a call made right in the caller of this, that names the
    innermost frame outside tracekern and NumPy (1, the caller, if there is none)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_internal(frame):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def describe_location(location: str | None) -> str:
    """A line for an error message: the file, line number and the text of that line."""
    if not location:
        return "  (no user source line found)"
    filename, _, lineno = location.rpartition(":")
    text = linecache.getline(filename, int(lineno)).strip() if lineno.isdigit() else ""
    return f"  at {location}" + (f": {text}" if text else "")


def with_location(message: str, location: str | None = None) -> str:
    """Append the user's source line (found now when `location` is None) to a message."""
    if location is None:
        location = user_frame_location()
    return f"{message}\n{describe_location(location)}"
