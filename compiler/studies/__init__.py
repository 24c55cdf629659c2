"""Studies: what drives the pipeline and the simulator over many plans, above both.

- :mod:`~a2acc.studies.compare`: planners side by side over sizes (``a2acc compare``);
- :mod:`~a2acc.studies.calibrate`: the simulator's parameters fitted to measured logs (``a2acc calibrate``),
  reading FAST's logs and nccl-tests output (:mod:`~a2acc.studies.logs`).

Nothing below (planners, the simulator, the pipeline) imports from here.
"""
