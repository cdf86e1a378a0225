"""An OTLP/HTTP request's body, read within bounds: fixed length or chunked, then decoded.

Real exporters send both framings: the Python SDK a ``Content-Length``, the Node.js SDK a
chunked body (``Transfer-Encoding: chunked``). Either is read up to a limit, and a
compressed body (``gzip``, ``deflate``) is decompressed up to the same limit of *output*:
a 500 KB gzip body can hold a gigabyte of zeros. Standard library only.
"""

from __future__ import annotations

import zlib
from typing import Final, Protocol

__all__ = ["BodyError", "decode_body", "read_body"]

#: How much of a body is read at a time when it is only drained (a refused request).
_PIECE: Final = 64 * 1024
#: The longest chunk-size line read (hex digits and extensions): more is no chunked body.
_CHUNK_LINE: Final = 1024
#: zlib's window bits for each Content-Encoding (gzip's header; deflate's zlib header, else
#: raw deflate, which some clients send under that name).
_WBITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}


class _Stream(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...
    def readline(self, size: int = ..., /) -> bytes: ...


class _Headers(Protocol):
    def get(self, name: str, /) -> str | None: ...


class BodyError(Exception):
    """A body the receiver will not take; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _too_large(limit: int, what: str = "body") -> BodyError:
    return BodyError(413, f"the request's {what} is over the receiver's limit of {limit} bytes")


def read_body(stream: _Stream, headers: _Headers, *, limit: int, keep: bool = True) -> bytes:
    """The body of a request whose headers were read: chunked or of ``Content-Length``.

    ``keep=False`` reads it to the end and keeps nothing (a refused request's body must
    still be read, or closing the connection resets it before the client reads the
    answer). Raises BodyError: 413 past ``limit``, 400 for a body cut short or malformed.
    """
    coding = (headers.get("Transfer-Encoding") or "").strip().lower()
    if coding:
        if coding.rsplit(",", 1)[-1].strip() != "chunked":
            raise BodyError(501, f"Transfer-Encoding {coding[:40]!r} is not supported")
        return _chunked(stream, limit=limit, keep=keep)
    raw = (headers.get("Content-Length") or "0").strip()
    if not raw.isdigit():
        raise BodyError(400, f"bad Content-Length {raw[:40]!r}")
    length = int(raw)
    if length > limit:
        raise _too_large(limit)
    return _exactly(stream, length, keep=keep)


def _exactly(stream: _Stream, length: int, *, keep: bool) -> bytes:
    pieces: list[bytes] = []
    left = length
    while left:
        piece = stream.read(min(left, _PIECE))
        if not piece:
            raise BodyError(400, f"the body ended after {length - left} of {length} bytes")
        left -= len(piece)
        if keep:
            pieces.append(piece)
    return b"".join(pieces)


def _chunked(stream: _Stream, *, limit: int, keep: bool) -> bytes:
    pieces: list[bytes] = []
    total = 0
    while True:
        line = stream.readline(_CHUNK_LINE + 1)
        if not line.endswith(b"\n"):
            raise BodyError(400, "a chunked body ended, or a chunk-size line is too long")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BodyError(400, f"bad chunk size {size_text[:20]!r}") from None
        if size < 0:
            raise BodyError(400, f"bad chunk size {size_text[:20]!r}")
        if size == 0:
            break
        total += size
        if total > limit:
            raise _too_large(limit)
        piece = _exactly(stream, size, keep=keep)
        if keep:
            pieces.append(piece)
        if stream.readline(3).strip():
            raise BodyError(400, "a chunk is longer than its size says")
    # Trailer fields, then the empty line that ends the body.
    for _ in range(100):
        line = stream.readline(_CHUNK_LINE + 1)
        if not line:
            raise BodyError(400, "a chunked body ended before its last line")
        if not line.strip():
            return b"".join(pieces)
    raise BodyError(400, "a chunked body's trailer is too long")


def decode_body(body: bytes, content_encoding: str | None, *, limit: int) -> bytes:
    """``body`` decompressed as its Content-Encoding says, at most ``limit`` bytes of output.

    Raises BodyError: 413 when the output would pass ``limit``, 400 for a body that is not
    of its encoding, 415 for an encoding the receiver does not know.
    """
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in _WBITS:
        return _inflate(body, _WBITS[encoding], encoding, limit=limit)
    if encoding == "deflate":
        try:
            return _inflate(body, zlib.MAX_WBITS, encoding, limit=limit)
        except BodyError as exc:
            if exc.status == 413:
                raise
            return _inflate(body, -zlib.MAX_WBITS, encoding, limit=limit)
    raise BodyError(415, f"Content-Encoding {encoding[:40]!r} is not supported (gzip, deflate)")


def _inflate(body: bytes, wbits: int, encoding: str, *, limit: int) -> bytes:
    out: list[bytes] = []
    size = 0
    rest = body
    # A gzip body may be several members one after the other (gzip.decompress reads them all).
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            piece = inflater.decompress(rest, limit + 1 - size)
        except zlib.error:
            raise BodyError(400, f"the body is not valid {encoding}") from None
        size += len(piece)
        if size > limit or inflater.unconsumed_tail:
            raise _too_large(limit, "decompressed body")
        out.append(piece)
        if not inflater.eof:
            raise BodyError(400, f"the {encoding} body is cut short")
        rest = inflater.unused_data
        if wbits < 16 or not rest.strip(b"\x00"):
            return b"".join(out)
