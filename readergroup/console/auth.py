"""Who may use the console, and what it may show: a bearer token (header or login cookie)
when one is configured, loopback-only binding without one, and no password in any URL shown.

>>> redact_url("redis://app:s3cret@db:6379/0")
'redis://app:***@db:6379/0'
>>> redact_url("redis+sentinel://:pw@h1:26379,h2:26379/mymaster")
'redis+sentinel://:***@h1:26379,h2:26379/mymaster'
>>> redact_url("unix:///run/redis.sock?password=pw&db=1")
'unix:///run/redis.sock?password=***&db=1'
>>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
(True, True, True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re

COOKIE = "rgconsole"
_USERINFO = re.compile(r"^(?P<scheme>[a-z+]+://)(?P<user>[^:@/]*):(?P<password>[^@/]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)[^&]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with any password (``user:password@`` or ``?password=``) replaced by ``***``."""
    url = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['key']}***", url)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TokenCheck:
    """Accepts a request carrying ``Authorization: Bearer <token>`` or the login cookie. The
    cookie holds a keyed hash of the token, never the token itself."""

    def __init__(self, token: str | None) -> None:
        self._token = token

    @property
    def required(self) -> bool:
        return self._token is not None

    def cookie_value(self) -> str:
        assert self._token is not None
        return hmac.new(self._token.encode(), b"readergroup-console", hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return self._token is not None and hmac.compare_digest(given.encode(), self._token.encode())

    def allows(self, authorization: str | None, cookie: str | None) -> bool:
        if self._token is None:
            return True
        if authorization is not None and authorization.startswith("Bearer "):
            return self.token_ok(authorization.removeprefix("Bearer ").strip())
        return cookie is not None and hmac.compare_digest(cookie, self.cookie_value())
