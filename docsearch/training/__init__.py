"""Fine-tuning: losses (pure functions), training data, the trainer."""
