"""The gateway's per-request pipeline (scope, guardrails, limits, budgets, cache, retries and fallbacks, output
filters, metering) and the parts it runs on. Protocol adapters (`cirrus.api`) call it; it imports none of them nor
the server above them, and leaves response headers to the server (`Call` carries what it decided)."""
