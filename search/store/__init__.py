"""What a campaign keeps on disk: its folder, the Optuna storage and journal, the environment record."""
