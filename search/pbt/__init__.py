"""Population-based training: the exploit/explore policy and the population's segments."""
