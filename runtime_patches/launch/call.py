"""One ``all_to_all_single`` call as the replay layer sees it: the caller's tensors and this rank's split sizes."""

from __future__ import annotations

from typing import Any


class Call:
    """The arguments of one call on one rank, after the rank-local checks. ``in_splits``/``out_splits``: rows
    per group rank (the caller's, or the even split when it gave none: ``even``); ``row_bytes``: bytes of one
    row (the first dimension); ``stock``: the unpatched ``all_to_all_single``; ``eligible``: tensors a2acc can
    serve in place (contiguous, one dtype, device and row shape, split sizes that add up)."""

    __slots__ = (
        "async_op",
        "eligible",
        "even",
        "group",
        "in_splits",
        "input",
        "out_splits",
        "output",
        "rank",
        "row_bytes",
        "stock",
        "world",
    )

    def __init__(
        self,
        output: Any,
        input: Any,
        group: Any,
        rank: int,
        world: int,
        in_splits: list[int],
        out_splits: list[int],
        row_bytes: int,
        eligible: bool,
        stock: Any,
        even: bool = False,
        async_op: bool = False,
    ) -> None:
        self.output = output
        self.input = input
        self.group = group
        self.rank = rank
        self.world = world
        self.in_splits = in_splits
        self.out_splits = out_splits
        self.row_bytes = row_bytes
        self.eligible = eligible
        self.stock = stock
        self.even = even
        self.async_op = async_op

    @property
    def nbytes(self) -> int:
        """Bytes this rank sends and receives (its own view of the call's size)."""
        return (sum(self.in_splits) + sum(self.out_splits)) * self.row_bytes
