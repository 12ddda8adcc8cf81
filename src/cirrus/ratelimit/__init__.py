"""Rate limits per token and model: requests and tokens per minute, in memory or a shared Redis."""

from cirrus.ratelimit.limiter import RateLimiter
from cirrus.ratelimit.policy import EffectiveLimits, effective_limits
from cirrus.ratelimit.status import RateStatus, WindowStatus
from cirrus.resilience.shared_redis import RedisUnavailable, SharedRedis

__all__ = [
    "EffectiveLimits",
    "RateLimiter",
    "RateStatus",
    "RedisUnavailable",
    "SharedRedis",
    "WindowStatus",
    "effective_limits",
]
