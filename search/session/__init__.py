"""Setting up a campaign: options, opening a new or resumed study, warm start, preflight checks."""
