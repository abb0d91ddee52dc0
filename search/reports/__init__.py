"""Reading a finished (or running) campaign: the HTML report, tables, status and reproduce checks."""
