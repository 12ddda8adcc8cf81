"""The ASGI app and its middleware stack."""
