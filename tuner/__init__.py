"""The tuner: Optuna studies over each kernel's config space, one per tuning key."""
