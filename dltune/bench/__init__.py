"""`dltune bench`: does the node perform as its hardware should? Measurements (PyTorch, imported only
here and only when the benchmark runs) are kept apart from their judgement (pure, testable)."""
