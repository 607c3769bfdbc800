"""The cli package."""
