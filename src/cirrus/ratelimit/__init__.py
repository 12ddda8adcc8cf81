"""Rate limits per token and model: requests and tokens per minute, in memory or a shared Redis."""

from cirrus.ratelimit.limiter import RateLimiter
from cirrus.ratelimit.policy import EffectiveLimits, effective_limits
from cirrus.ratelimit.status import RateStatus, WindowStatus

__all__ = ["EffectiveLimits", "RateLimiter", "RateStatus", "WindowStatus", "effective_limits"]
