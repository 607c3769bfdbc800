"""Everchat."""
