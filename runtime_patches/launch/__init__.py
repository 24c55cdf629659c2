"""The JIT's replay layer: plans bound once, replayed per call (the hot path).

:mod:`.program` compiles one rank's part of a plan into exchanges over one buffer of rows; :mod:`.bound`
binds it to buffers, views, index tensors and posting forms; :mod:`.slots` packs and unpacks the caller's rows
with fixed-shape device operations; :mod:`.post` posts exchanges and counts what was posted; :mod:`.residual`
moves rows beyond a plan's layout; :mod:`.streams` orders all of it on the caller's CUDA stream;
:mod:`.arena` runs executors that work on one uniform buffer; :mod:`.capture` binds a plan at a fixed capacity
for CUDA-graph capture; :mod:`.packing` is the same packing for offline users of ``a2acc compile`` output.

Nothing here imports :mod:`a2acc.runtime.decide`: what to run is decided there, how to run it here.
"""
