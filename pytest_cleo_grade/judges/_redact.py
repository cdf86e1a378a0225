"""Keep judge credentials out of text: redacted URLs, and secrets masked in error messages.

A judge URL may carry a key (``?api-key=...``, ``https://user:key@host``); every URL the
package prints, stores or puts in a cache row goes through :func:`redact_url`, and every text
that came back from an endpoint goes through :func:`mask` with the request's secrets.
Pure string work (no urllib): the rubric layer prints URLs too.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final

__all__ = ["MASK", "basic_token", "mask", "redact_url", "url_secrets"]

MASK: Final = "***"

# scheme://[userinfo@]host[:port][/path][?query][#fragment]
_URL: Final = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?:(?P<userinfo>[^/?#@]*)@)?"
    r"(?P<rest>[^?#]*)"
    r"(?:\?(?P<query>[^#]*))?"
    r"(?P<fragment>#.*)?$",
    re.DOTALL,
)
#: Query parameters whose values are credentials (api-key, key, access_token, sig, ...).
_SECRET_PARAM: Final = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential", re.I)
_PERCENT: Final = re.compile(rb"%([0-9A-Fa-f]{2})")
#: Shorter strings are not masked: masking every "a" would garble the message, not protect it.
_MIN_SECRET_CHARS: Final = 3


def _unquote(text: str) -> str:
    raw = _PERCENT.sub(lambda m: bytes([int(m.group(1), 16)]), text.encode("utf-8", "replace"))
    return raw.decode("utf-8", "replace").replace("+", " ")


def _secret_params(query: str) -> list[tuple[str, str]]:
    """(name, value) of the query's credential parameters, as written in the URL."""
    found = []
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        if sep and value and _SECRET_PARAM.search(_unquote(name)):
            found.append((name, value))
    return found


def redact_url(url: str) -> str:
    """``url`` with its userinfo and credential query values replaced by ``***``."""
    match = _URL.match(url)
    if match is None:
        return url
    out = match["scheme"]
    if match["userinfo"] is not None:
        out += f"{MASK}@"
    out += match["rest"]
    if match["query"] is not None:
        pairs = []
        for pair in match["query"].split("&"):
            name, sep, value = pair.partition("=")
            if sep and value and _SECRET_PARAM.search(_unquote(name)):
                pair = f"{name}={MASK}"
            pairs.append(pair)
        out += "?" + "&".join(pairs)
    return out + (match["fragment"] or "")


def url_secrets(url: str) -> list[str]:
    """The credentials written in ``url`` (userinfo parts, credential query values), both as
    written and percent-decoded, for :func:`mask`."""
    match = _URL.match(url)
    if match is None:
        return []
    found: list[str] = []
    basic: list[str] = []
    if match["userinfo"]:
        user, _, password = match["userinfo"].partition(":")
        found += [match["userinfo"], user, password]
        # As an HTTP client sends them (Authorization: Basic ...), which a server may echo.
        basic.append(basic_token(_unquote(user), _unquote(password)))
    if match["query"]:
        found += [value for _, value in _secret_params(match["query"])]
    decoded = [_unquote(secret) for secret in found]
    return [secret for secret in found + decoded + basic if secret]


def basic_token(user: str, password: str) -> str:
    """The base64 ``user:password`` of an ``Authorization: Basic`` header."""
    return base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***`` (longest first)."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_CHARS:
            text = text.replace(secret, MASK)
    return text
