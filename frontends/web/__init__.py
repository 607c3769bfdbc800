"""`everchat web`: the chat in a browser, and `everchat connect` (docs/WEB.md)."""
__all__: list[str] = []
