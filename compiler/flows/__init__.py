"""Multi-commodity flow on the topology graph, shared by the ``mcf`` planner and the ``mcf`` bound.

- :mod:`.network`: the topology as arrays (nodes, directed edges, capacities, which node each rank is);
- :mod:`.lp`: building and solving LPs with HiGHS from column-wise sparse arrays;
- :mod:`.mcf`: the formulations (link-based, path-based over k shortest paths, time-stepped);
- :mod:`.paths`: flows to per-(source, destination) paths and whole-chunk pieces;
- :mod:`.decompose`: the master LP + child LPs decomposition for large graphs;
- :mod:`.parallel`: the executor the child LPs run on (local processes or a Dask cluster).

The formulation is written down in ``docs/planners.md`` (the ``mcf`` section).
"""
