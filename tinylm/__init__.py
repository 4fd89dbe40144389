"""tinylm."""
