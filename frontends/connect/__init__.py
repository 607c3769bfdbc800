"""The connect package."""
