"""The ASGI app on top of everything: routers, error handlers, the middleware stack and the HTTP edge."""
