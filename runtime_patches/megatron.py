"""Opt-in Megatron-LM helper: hand the MoE dispatcher's already-gathered counts to a2acc, so its calls need no
exchange of their own.

Where it hooks (Megatron-LM ``megatron/core/transformer/moe/token_dispatcher.py``):
``MoEAlltoAllTokenDispatcher.preprocess`` all-gathers ``num_local_tokens_per_expert`` into
``num_global_tokens_per_expert`` of shape ``[tp_size, ep_size, num_experts]``; every rank therefore knows the whole
token matrix before ``token_dispatch`` calls ``all_to_all(ep_group, tokens, output_splits, input_splits)``, which
reaches ``torch.distributed.all_to_all_single`` (patched by ``A2ACC_JIT=1``). Call :func:`announce` right after
``preprocess`` with that tensor (and the EP group); the combine step (splits swapped) uses the transposed matrix:
``announce(..., combine=True)``. Through :func:`a2acc.runtime.announce`, a call whose plan every rank already
has then skips a2acc's split-size exchange (no extra collective, no host sync).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def rows_from_tokens_per_expert(num_global_tokens_per_expert: Any, tp_rank: int = 0) -> npt.NDArray[np.int64]:
    """Token matrix [src_ep, dst_ep] from Megatron's ``[tp, ep, num_experts]`` counts (experts split evenly)."""
    t = np.asarray(
        num_global_tokens_per_expert.cpu()
        if hasattr(num_global_tokens_per_expert, "cpu")
        else num_global_tokens_per_expert,
        dtype=np.int64,
    )
    if t.ndim == 2:
        t = t[None]
    _, ep, experts = t.shape
    if experts % ep:
        raise ValueError(f"{experts} experts do not split evenly over {ep} expert-parallel ranks")
    return np.asarray(t[tp_rank].reshape(ep, ep, experts // ep).sum(axis=2), dtype=np.int64)


def announce(
    num_global_tokens_per_expert: Any, tp_rank: int = 0, combine: bool = False, group: Any = None
) -> bool:
    """Tell the active a2acc engine the next call's matrix on ``group`` (the EP group); False if a2acc is not
    active. See :func:`a2acc.runtime.announce` for the contract (the same matrix on every rank)."""
    from a2acc.runtime import announce as announce_rows

    rows = rows_from_tokens_per_expert(num_global_tokens_per_expert, tp_rank)
    return announce_rows(rows.T.copy() if combine else rows, group)
