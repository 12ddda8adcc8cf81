"""The engine, in worker processes, and the small transport the server uses to reach them."""
