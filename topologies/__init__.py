"""Preset topology files (YAML), shipped as package data; `a2acc topo list` shows them."""
