"""Elastic trials: a trial the search wants to continue grows (or shrinks) its data-parallel width between
segments, its learning rate after a stated rule, with free slots going where goodput per slot gains most."""
