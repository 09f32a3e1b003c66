"""The simulated server's per-tenant rate limit (``loadgen sim --rate-limit TENANT=RPS``), as a
gateway in front of an engine applies one."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RateLimits:
    """Requests a second per tenant (the value of the ``header`` a gateway tags requests with), each a
    token bucket holding one second of its rate (at least one request): a request that finds it empty
    gets a 429 with ``Retry-After`` (whole seconds until a token is back), as a gateway's limiter
    answers. Requests without the header, or of a tenant without a limit, pass."""

    per_s: dict[str, float]
    header: str = "x-tenant"
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # tenant -> (tokens, at)

    def take(self, tenant: str, now: float) -> float:
        """0 when the tenant's request may pass (a token taken), else the seconds until one may."""
        rate = self.per_s.get(tenant)
        if rate is None:
            return 0.0
        size = max(1.0, rate)
        tokens, at = self._buckets.get(tenant, (size, now))
        tokens = min(size, tokens + (now - at) * rate)
        if tokens >= 1.0:
            self._buckets[tenant] = (tokens - 1.0, now)
            return 0.0
        self._buckets[tenant] = (tokens, now)
        return (1.0 - tokens) / rate
