"""Batch-size scaling sweeps: the fits (McCandlish et al. 2018), the sweep's sampler and target, the plots."""
