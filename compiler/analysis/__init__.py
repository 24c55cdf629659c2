"""Analysis of Programs: flow-level simulation, the incast model, lower bounds, algorithm comparison."""
