"""Model artifacts on disk."""
