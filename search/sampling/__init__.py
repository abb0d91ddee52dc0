"""Where trials come from: the sampler registry, evolution, pruning, and the askers that sample off the loop."""
