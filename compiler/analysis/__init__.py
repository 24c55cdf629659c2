"""Analysis of Programs, below the planners: the simulator's model (``model``, ``incast``), its two engines
(``simulate``: the event-driven reference; ``fastsim``: the fast one everything else uses) and lower bounds
(``bounds``). A planner may ask what a plan costs (syccl picks its candidate by simulation); nothing here imports
a planner or the pipeline. Comparisons and calibration drive the pipeline, so they live above it, in
:mod:`a2acc.studies`. docs/simulator.md."""
