"""Secrets kept out of errors, log lines and reprs: the one place that hides passwords in
URLs, option mappings, dataclass reprs and free text (both packages use it).

>>> redact_url("redis://app:s3cret@cache:6379/0")
'redis://app:***@cache:6379/0'
>>> redact_url("redis://h:6379/0?password=s3cret&db=1")
'redis://h:6379/0?password=***&db=1'
>>> redact("'rediss+sentinel://:pw@a:1,b:x/svc': bad port in 'b:x'")
"'rediss+sentinel://:***@a:1,b:x/svc': bad port in 'b:x'"
>>> redact_options({"username": "app", "password": "s3cret", "ssl_ca_certs": "ca.pem"})
{'username': 'app', 'password': '***', 'ssl_ca_certs': 'ca.pem'}
>>> redact("auth failed for s3cret", ["s3cret"])
'auth failed for ***'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

MASK = "***"

_SECRET_OPTION = re.compile(r"pass|secret|token|credential", re.IGNORECASE)
"""An option whose value is a secret: ``password``, ``ssl_password``, ``passwd``,
``client_secret``, ``token``, ``credential_provider``..."""

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
"""A URL inside free text (up to whitespace or a quote)."""

_SECRET_QUERY = re.compile(r"([?&][^=&#]*(?:pass|secret|token)[^=&#]*=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with the password of its credentials (``user:password@``; a lone credential,
    ``secret@``, is hidden whole) and any password-like query parameter replaced by ``***``.
    Several hosts (``a:1,b:2``) and passwords holding ``@`` are handled as Redis's URL parser
    splits them: the credentials end at the last ``@`` before the path."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _redact_query(url)
    end = len(rest)
    for stop in "/?#":
        found = rest.find(stop, rest.rfind("@") + 1 if "@" in rest else 0)
        if found != -1:
            end = min(end, found)
    netloc, tail = rest[:end], rest[end:]
    if "@" in netloc:
        credentials, _, hosts = netloc.rpartition("@")
        user, colon, _ = credentials.partition(":")
        netloc = f"{user}:{MASK}@{hosts}" if colon else f"{MASK}@{hosts}"
    return f"{scheme}{sep}{netloc}{_redact_query(tail)}"


def _redact_query(text: str) -> str:
    return _SECRET_QUERY.sub(lambda match: match.group(1) + MASK, text)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`) and every one of
    ``secrets`` (as given and percent-encoded) replaced by ``***``."""
    text = _URL.sub(lambda match: redact_url(match.group(0)), text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            text = text.replace(form, MASK)
    return text


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with the values of secret-named keys replaced by ``***`` and URL
    values redacted."""
    return {
        name: MASK
        if _SECRET_OPTION.search(str(name)) and value is not None
        else _redact_value(value)
        for name, value in options.items()
    }


def _redact_value(value: Any) -> Any:
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    if isinstance(value, Mapping):
        return redact_options(value)
    return value


def redacted_repr(instance: Any) -> str:
    """The dataclass repr of ``instance`` (fields with ``repr=True``), with mappings of options
    and URLs redacted: the ``__repr__`` of configurations that may hold a password."""
    shown = ", ".join(
        f"{field.name}={_redact_value(getattr(instance, field.name))!r}"
        for field in dataclasses.fields(instance)
        if field.repr
    )
    return f"{type(instance).__qualname__}({shown})"
