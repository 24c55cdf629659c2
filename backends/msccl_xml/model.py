"""In-memory form of an MSCCL XML algorithm (``<algo>`` > ``<gpu>`` > ``<tb>`` > ``<step>``)
as msccl-executor-nccl's ``src/misc/msccl/msccl_parser.cc`` reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

SEND_TYPES = frozenset({"s", "rcs", "rrs", "rrcs"})
RECV_TYPES = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
RCCL_TYPES = frozenset({"s", "r", "cpy", "re", "nop"})
COLLS = (
    "reduce",
    "broadcast",
    "allreduce",
    "reducescatter",
    "allgather",
    "send",
    "recv",
    "gather",
    "scatter",
    "alltoall",
    "alltoallv",
)
PROTOS = ("Simple", "LL", "LL128")
ALGO_ATTRS = (
    "name",
    "proto",
    "nchannels",
    "nchunksperloop",
    "ngpus",
    "coll",
    "inplace",
    "outofplace",
    "minBytes",
    "maxBytes",
)

# executor limits (msccl-executor-nccl's src/include/msccl/msccl_struct.h; RCCL's MSCCL_MAX_NUM_THREAD_BLOCKS)
MAX_STEPS = 64
MAX_COUNT = 71
MAX_TBS_RCCL = 64
MAX_DEP_TB = 127
MAX_TBS_PER_CHANNEL = 32
MAX_CHANNELS_NCCL = 32
MAX_CHANNELS_RCCL = 128
MAX_NODES = 4096
MAX_ATTRS = 16
MAX_OFFSET = 32767  # int16 offsets in the device structs


@dataclass
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    line: int = 0


@dataclass
class Tb:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step] = field(default_factory=list)
    line: int = 0


@dataclass
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list[Tb] = field(default_factory=list)
    line: int = 0


@dataclass
class Algo:
    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int
    min_bytes: int
    max_bytes: int
    gpus: list[Gpu] = field(default_factory=list)
    extra_attrs: dict[str, str] = field(default_factory=dict)
