"""Collectors: turn what sources read into catalogue samples; one collector per file."""
