"""a2acc.runtime: run-time integrations (JIT all-to-all for PyTorch, MSCCL executor glue, MSCCL++ seam).

Activation without code changes: ``A2ACC_JIT=1`` (read by the ``a2acc-jit.pth`` hook at interpreter start).
Explicit use: :func:`a2acc.runtime.torch_patch.install` / :func:`uninstall`, or the drop-in
:func:`a2acc.runtime.torch_patch.all_to_all_single`. See ``docs/runtime.md``.
"""
