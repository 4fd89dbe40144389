"""Measuring tinylm itself (speed, step profile, health-callback cost); nothing that trains imports this."""
