"""Inputs, no IR: topology (file schema, presets, graph generators, routes), traffic matrices, units."""
