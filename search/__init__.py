"""The controller: specs, the ask/tell campaign loop, samplers, pruning, summaries and the CLI."""

__all__ = ["cli", "campaign", "spec", "runner"]
