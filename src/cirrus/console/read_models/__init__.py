"""What the console's pages show, read from the services the APIs use (pool statuses, usage store, catalog)."""
