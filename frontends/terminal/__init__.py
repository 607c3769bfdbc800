"""The terminal package."""
