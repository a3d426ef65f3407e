"""Where Redis is: one server, a Sentinel-managed primary, or a Cluster given by seed nodes.

URL forms (parsed here, once, for every client of both packages):

* ``redis://``, ``rediss://``, ``unix://``: one server (redis-py's own URL rules);
* ``redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[/db]`` (and
  ``rediss+sentinel://`` for TLS to the data nodes): the primary that the Sentinels name for
  ``service_name``. Each new connection asks the Sentinels where the primary is, and a
  connection that finds itself on a demoted primary (``READONLY``) is dropped, so clients
  follow a switch without writing to the old primary once it has been demoted;
* for a Cluster, ``redis://[user:pass@]host:port[,host:port...][/0]``: several seed nodes, so
  a dead seed does not stop a client from starting.

>>> t = parse_sentinel_url("redis+sentinel://u:p@h1:26379,h2:26380/orders/2")
>>> (t.sentinels, t.service, t.db, t.username, t.password, t.tls)
([('h1', 26379), ('h2', 26380)], 'orders', 2, 'u', 'p', False)
>>> is_sentinel_url("redis://localhost:6379/0"), is_sentinel_url("redis+sentinel://h:1/s")
(False, True)
>>> split_seeds("redis://:secret@a:7000,b:7001/0")
('redis://:secret@a:7000/0', [('a', 7000), ('b', 7001)])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from statesync.errors import EndpointURLError
from statesync.redaction import redact_url

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """A ``redis+sentinel://`` URL, parsed."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    tls: bool


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def _split_credentials(netloc: str) -> tuple[str | None, str | None, str]:
    if "@" not in netloc:
        return None, None, netloc
    credentials, _, hosts = netloc.rpartition("@")
    user, sep, password = credentials.partition(":")
    return (unquote(user) or None), (unquote(password) if sep else None), hosts


def _host_ports(hosts: str, default_port: int, url: str) -> list[tuple[str, int]]:
    out = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = port, str(default_port)
        if not host:
            raise EndpointURLError(f"{redact_url(url)!r}: empty host in {item!r}")
        try:
            out.append((host.strip("[]"), int(port)))
        except ValueError:
            raise EndpointURLError(f"{redact_url(url)!r}: bad port in {item!r}") from None
    return out


def parse_sentinel_url(url: str) -> SentinelTarget:
    """Parse ``redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[/db]``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SENTINEL_SCHEMES:
        raise EndpointURLError(f"{redact_url(url)!r} is not a redis+sentinel:// URL")
    netloc, _, path = rest.partition("/")
    username, password, hosts = _split_credentials(netloc)
    parts = [p for p in path.split("/") if p]
    if not parts or len(parts) > 2:
        raise EndpointURLError(
            f"{redact_url(url)!r}: expected /service_name[/db] after the Sentinels"
        )
    try:
        db = int(parts[1]) if len(parts) == 2 else 0
    except ValueError:
        raise EndpointURLError(f"{redact_url(url)!r}: the database must be a number") from None
    return SentinelTarget(
        _host_ports(hosts, 26379, url),
        unquote(parts[0]),
        db,
        username,
        password,
        scheme.lower().startswith("rediss"),
    )


def sentinel_setup(
    target: SentinelTarget,
    options: dict[str, Any],
    *,
    socket_timeout: float,
    sentinel_options: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the primary's connection options, the Sentinels' own) for ``target``: the URL's
    credentials win over ``options``' (as in redis-py's ``from_url``; never both), TLS when the
    URL asks for it, and a connect timeout of at most 5 s (for both, unless given)."""
    auth = {"username": target.username, "password": target.password}
    primary = {**options, **{name: value for name, value in auth.items() if value is not None}}
    if target.tls:
        primary = {"ssl": True, **primary}
    primary.setdefault("socket_connect_timeout", min(socket_timeout, 5.0))
    sentinels = {"socket_timeout": min(socket_timeout, 5.0), **(sentinel_options or {})}
    return primary, sentinels


def split_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL with several ``host:port`` seeds: (the URL with the first seed only, every
    seed). A URL with one host gives a list of one."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    credentials = netloc.rpartition("@")[0] if "@" in netloc else ""
    hosts = netloc.rpartition("@")[2]
    seeds = _host_ports(hosts, 6379, url)
    first = f"{seeds[0][0]}:{seeds[0][1]}"
    at = f"{credentials}@" if credentials else ""
    return f"{scheme}{sep}{at}{first}{slash}{path}", seeds
