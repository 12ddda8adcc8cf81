"""Staying up while what we depend on is down: deadlines and circuit breakers around the stores."""

from cirrus.resilience.breaker import BreakerOpen, BreakerState, CircuitBreaker

__all__ = ["BreakerOpen", "BreakerState", "CircuitBreaker"]
