"""Fault tests: real servers, real faults (signals to workers, stopped and frozen PostgreSQL and Redis, hostile
connections). Each test starts what it breaks, so no fault leaks into another test, and every wait is bounded."""
