"""Store URLs as people type them: checked before any connection, and shown with the
password masked (`postgresql://u:***@host/db`), whatever the password holds.

Masking is textual, so that it works on URLs no parser accepts: everything between the
user name and the last `@` is the password, a `password=` parameter's value is too.
Masking too much is harmless; masking too little would print a secret.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

from noeta.core.errors import ConfigError

_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&]*")
_CONNINFO_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PATTERN = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"


def masked(url: str) -> str:
    """`url` with any password in it replaced by `***`."""
    scheme, separator, rest = url.partition("://")
    if not separator:  # libpq's `key=value …` form
        return _CONNINFO_PASSWORD.sub(r"\1***", url)
    userinfo, at, place = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.split(':', 1)[0]}:***@{place}"
    return _QUERY_PASSWORD.sub(r"\1***", f"{scheme}://{rest}")


def holds_password(url: str) -> bool:
    """Whether `url` carries a password (in its user info or a `password=` parameter)."""
    return masked(url) != url


def check_postgres_url(url: str) -> None:
    """ConfigError, naming the URL masked, for what libpq would refuse or misread; the
    connection's own errors are left to the connection."""
    if "://" not in url:
        return  # key=value: libpq's parser is the only judge (postgres/session.py)
    shown = masked(url)
    if _unescaped_at(url):
        raise ConfigError(
            f"store URL {shown}: escape @ in the password as %40 (also in the user name "
            f"or database); use {_PATTERN}"
        )
    bad = _BAD_PERCENT.search(url)
    if bad:
        raise ConfigError(
            f"store URL {shown}: a '%' must start a %XX escape; write a '%' in a password "
            "or any value as %25"
        )
    try:
        parts = urlsplit(url)
        parse_qsl(parts.query, strict_parsing=bool(parts.query))
    except ValueError as error:
        raise ConfigError(
            f"store URL {shown} is not a valid URL ({error}); use {_PATTERN}"
        ) from None
    hosts = parts.netloc.rpartition("@")[2]
    for host in hosts.split(","):  # libpq takes several: host1:port1,host2:port2
        port = host.rpartition("]")[2] if host.startswith("[") else host
        port = port.rpartition(":")[2] if ":" in port else ""
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            # An '@' after the authority: this "port" is a piece of a password cut at '/'.
            cut = "@" in url and "@" not in parts.netloc
            what = "the text in the port's place" if cut else repr(port)
            raise ConfigError(
                f"store URL {shown}: {what} is not a port "
                "(1-65535); a '/', '@' or ':' "
                f"in a password is written %2F, %40 or %3A; use {_PATTERN}"
            )
    if not hosts and parts.path in ("", "/") and not _environment_names_a_server():
        raise ConfigError(f"store URL {shown} names no server and no database; use {_PATTERN}")


def _unescaped_at(url: str) -> bool:
    """More than one '@' before the query: libpq ends the user name and password at the
    first '@' and would read the rest of the password as the host, then print it."""
    rest = url.partition("://")[2].partition("?")[0]
    return rest.count("@") > 1


def _environment_names_a_server() -> bool:
    """libpq fills in a bare postgresql:// from PGHOST, PGDATABASE or PGSERVICE."""
    return any(os.environ.get(name) for name in ("PGHOST", "PGDATABASE", "PGSERVICE"))
