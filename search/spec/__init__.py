"""Reading a campaign spec: the TOML tables, their checks, and the typed spec they become."""
