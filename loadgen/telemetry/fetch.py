"""One small HTTP GET for the scrapers (server /metrics, DCGM exporter, remote monitor).

Direct connections only (no proxy from the environment: these are hosts on the local network).
Errors become ``FetchError`` with the URL and the reason in words.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FetchError(Exception):
    pass


def get(url: str, timeout_s: float = 2.0, headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    """GET ``url``; return the body and the response headers (lower-case names)."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            body = resp.read()
            return body, {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = getattr(reason, "strerror", None) or str(reason)
        raise FetchError(f"cannot reach {url}: {text}") from None
    except TimeoutError:
        raise FetchError(f"{url}: no answer within {timeout_s:g} s") from None
    except (http.client.HTTPException, OSError) as exc:
        raise FetchError(f"{url}: {exc.__class__.__name__}: {exc}") from None
