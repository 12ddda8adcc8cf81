"""Offline evaluation: model quality, context limits, server latency and cost. Never on the request path."""
