"""Exception hierarchy of a2acc.

Library code raises these; only the CLI turns them into an exit code. Every input error names the file, the
field, the offending value and what is allowed, so a user can fix the input without reading code.
"""

from __future__ import annotations

import reprlib


class A2accError(Exception):
    """Base class of every error a2acc raises on purpose."""


#: how a container value is shown: a few elements and levels (a YAML alias bomb expands to billions of
#: elements; its full repr, shortened afterwards, took gigabytes)
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxset = 3, 4, 6, 6, 6
_SHORT.maxstring, _SHORT.maxother = 60, 60


class InputError(A2accError):
    """A user-supplied file or value is invalid.

    The message has the form ``FILE: FIELD: value VALUE is invalid; ALLOWED``.
    """

    def __init__(self, source: str, field: str, value: object, allowed: str) -> None:
        self.source = source
        self.field = field
        self.value = value
        self.allowed = allowed
        shown = _SHORT.repr(value) if isinstance(value, (dict, list, tuple, set)) else repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        where = f"{source}: " if source else ""
        fld = f"{field}: " if field else ""
        super().__init__(f"{where}{fld}value {shown} is invalid; {allowed}")


class TopologyError(InputError):
    """A topology file or preset is invalid."""


class TrafficMatrixError(InputError):
    """A traffic matrix file or generator argument is invalid."""


class PlanFormatError(InputError):
    """A serialised Program (plan JSON) is malformed or of an unsupported version."""


class PlannerError(A2accError):
    """A planner cannot handle the given topology or matrix (e.g. FAST on a direct-connect graph)."""


class VerificationError(A2accError):
    """A Program or lowered file failed verification; ``issues`` lists every problem found."""

    def __init__(self, what: str, issues: list[str]) -> None:
        self.issues = issues
        head = f"{what}: {len(issues)} verification error(s)"
        body = "\n".join(f"  - {i}" for i in issues[:50])
        more = f"\n  ... and {len(issues) - 50} more" if len(issues) > 50 else ""
        super().__init__(f"{head}\n{body}{more}")


class LoweringError(A2accError):
    """A Program cannot be lowered to a backend, e.g. it exceeds an executor limit.

    ``follows_transfers``: the limit is one of transfers and peers (thread blocks that must all be resident),
    which a coarser chunk layout keeps (every pair that sends still sends): the pipeline's padding ladder then
    tries only its coarsest layout before it gives up, instead of every layout in between."""

    def __init__(self, message: str, *, follows_transfers: bool = False) -> None:
        super().__init__(message)
        self.follows_transfers = follows_transfers


class InternalError(A2accError):
    """An internal invariant broke: an a2acc bug, never the user's input. The message says so."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} (a2acc bug: please report it with the command that triggered it)")


class RuntimeHookError(A2accError):
    """The JIT/runtime integration cannot serve a call; callers fall back to the stock collective."""


class AnnounceError(A2accError, ValueError):
    """A matrix announced to the JIT (``a2acc.runtime.announce``) is malformed, or an announced call has tensors
    a2acc cannot serve in place on this rank. Raised, never hidden: a rank cannot take the stock call alone
    while the others run the plan without an exchange."""


class CaptureError(A2accError, ValueError):
    """A fixed-capacity binding for CUDA-graph capture (``a2acc.runtime.capture``) cannot be made as asked: a
    malformed capacity, no JIT engine, ranks that bound different capacities or plans."""


class CapacityOverflow(A2accError, RuntimeError):
    """Rows beyond a bound capacity were not moved, under ``overflow="flag"`` (``CapacityLaunch.check``)."""
