"""Metrics for Prometheus (`metrics`, `pool_collector`) and structured JSON logs (`logs`, `redact`).

Import the submodules themselves: worker processes use `logs` alone and must not pay for prometheus-client.
"""
