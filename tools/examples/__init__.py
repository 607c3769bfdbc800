"""Small runnable examples."""
