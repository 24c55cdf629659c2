"""What the JIT path keeps between calls: skew buckets (matrix -> layout) and the plan cache."""
