"""Analysis of Programs: the simulator's model (``model``, ``incast``), its two engines (``simulate``: the
event-driven reference; ``fastsim``: the fast one the CLI uses), calibration against measured logs
(``calibrate``), lower bounds (``bounds``) and algorithm comparison (``compare``). docs/simulator.md."""
