"""In-memory form of an MSCCL++ JSON execution plan, the schema the ``mscclpp`` Executor reads since v0.8.

The fields and their meaning follow the executor's reader (microsoft/mscclpp
``src/core/executor/execution_plan.cc``) and device structs (``src/core/include/execution_common.hpp``):
a plan holds one :class:`Gpu` per rank; a GPU holds its channel groups (flattened per type into global channel
ids), the peer buffers it writes or reads (global remote-buffer ids), its semaphores and its thread blocks; a
thread block maps TB-local channel and remote-buffer indices to the global ones and runs its :class:`Op` list in
order. Buffer references count in chunks; the executor turns them into bytes at load time.

The lowering (:mod:`.lower`) builds this model, :mod:`.emit_json` and :mod:`.emit_dsl` write it, :mod:`.reader`
builds it back from text and :mod:`.interp` runs it. The limits below are the executor's (checked by the reader
and respected by the lowering).
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------- executor limits
# src/core/include/execution_common.hpp: MAX_OPERATION, MAX_CHANNEL, MAX_CHANNEL_PER_OPERATION,
# MAX_LOCAL_BUFFER_PER_OPERATION, MAX_DEVICE_SYNCERS, MAX_DEVICE_SEMAPHORES
MAX_OPS_PER_TB = 64
MAX_CHANNELS_PER_TB = 16  # per channel type; also remote buffer refs per access type
MAX_CHANNELS_PER_OP = 8
MAX_REFS_PER_OP = 10  # 2 local + 8 remote buffer references per side
MAX_BARRIERS = 16
MAX_SEMAPHORES_PER_OP = 16
MAX_THREADS_PER_BLOCK = 1024  # __launch_bounds__(1024, 1) in execution_kernel.hpp
MAX_PIPELINE_ITERATIONS = 65535  # iterations counted in uint16 by the kernel
MAX_U32 = (1 << 32) - 1  # byte offsets and sizes are uint32 in the Operation struct
MAX_U64 = (1 << 64) - 1

BUFFER_TYPES = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")
PROTOCOLS = ("Simple", "LL")
# getOpType in execution_plan.cc (HEAD); "start" and "glre" exist in the DSL's enum but not here
OP_NAMES = (
    "nop",
    "barrier",
    "put",
    "pws",
    "pwsf",
    "get",
    "copy",
    "signal",
    "wait",
    "flush",
    "re",
    "res",
    "rre",
    "rres",
    "ppkt",
    "rppkt",
    "respkt",
    "cpkt",
    "upkt",
    "repkt",
    "recpkt",
    "recspkt",
    "glres",
    "gstore",
    "gstorepkt",
    "rlxsignal",
    "rlxwait",
    "pipeline",
    "sem_acquire",
    "sem_release",
)
PACKET_OPS = frozenset({"ppkt", "rppkt", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt", "gstorepkt"})


@dataclass(frozen=True)
class BufRef:
    """One entry of ``src_buff``/``dst_buff``: local (``type``), remote (``buffer_id``: a TB-local index into
    the thread block's remote buffers of the op's channel type) or switch (``switch_id``: TB-local switch
    channel). ``index``/``size`` count chunks."""

    index: int
    size: int
    type: str = ""
    buffer_id: int = -1
    switch_id: int = -1

    @property
    def kind(self) -> str:
        if self.buffer_id >= 0:
            return "remote"
        if self.switch_id >= 0:
            return "switch"
        return "local"


@dataclass(frozen=True)
class Op:
    """One operation of a thread block (or of a ``pipeline``'s body). Absent JSON keys are None."""

    name: str
    channel_type: str | None = None
    channel_ids: tuple[int, ...] | None = None
    src: tuple[BufRef, ...] | None = None
    dst: tuple[BufRef, ...] | None = None
    semaphore_ids: tuple[int, ...] | None = None
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    tbg: tuple[int, int] | None = None  # (tb_id, tbg_size)
    iter_context: tuple[int, int] | None = None  # (unit_size bytes, num_chunks)
    ops: tuple[Op, ...] = ()
    reduce_op: str | None = None


@dataclass(frozen=True)
class TbTable:
    """A thread block's ``channels`` entry (``channel_ids``) or ``remote_buffer_refs`` entry
    (``remote_buffer_ids``): the position in ``ids`` is the TB-local index ops use."""

    channel_type: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class ThreadBlock:
    id: int
    ops: tuple[Op, ...]
    channels: tuple[TbTable, ...] = ()
    remote_buffer_refs: tuple[TbTable, ...] = ()


@dataclass(frozen=True)
class ChannelGroup:
    """``{channel_type, connected_to}`` (memory/port) or a switch group ``{buffer_type, rank_groups}``."""

    channel_type: str
    connected_to: tuple[int, ...] = ()
    buffer_type: str = ""
    rank_groups: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (size, ranks)


@dataclass(frozen=True)
class RemoteBuffer:
    rank: int
    type: str
    access_channel_types: tuple[str, ...]


@dataclass(frozen=True)
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[ThreadBlock, ...]
    channels: tuple[ChannelGroup, ...]
    remote_buffers: tuple[RemoteBuffer, ...]
    semaphores: tuple[int, ...] = ()  # init values

    def peers(self, channel_type: str) -> tuple[int, ...]:
        """The flattened ``connected_to`` of one type: position = global channel id on this GPU."""
        out: list[int] = []
        for g in self.channels:
            if g.channel_type == channel_type:
                out.extend(g.connected_to)
        return tuple(out)


@dataclass(frozen=True)
class Plan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[Gpu, ...]
    reuse_resources: bool = False
    num_threads_per_block: int = 1024
    use_double_scratch_buffer: bool = False
    buffer_alignment: int = 16
    min_message_size: int = 0
    max_message_size: int = MAX_U64

    @property
    def ngpus(self) -> int:
        return len(self.gpus)


def flat_ops(ops: tuple[Op, ...]) -> int:
    """Operations the executor stores for a list: a ``pipeline`` counts once plus its body
    (``setupOperations`` in execution_plan.cc flattens the body right after it)."""
    return sum(1 + len(o.ops) for o in ops)
