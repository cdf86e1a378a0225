"""An httpx transport that reads no reply past a size cap (the Langfuse export's).

httpx reads a whole reply into memory when a client asks for its JSON, whatever its size: a
server (or a proxy) answering with gigabytes would take the pytest run's memory with it. The
transport asks for replies unencoded, stops reading at the cap (a Content-Length over it is
refused before the body is read), and decompresses a reply the server encoded anyway only up
to the same cap of output.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Final

import httpx

__all__ = ["CappedTransport", "ReplyTooLarge"]

_WBITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 47}


class ReplyTooLarge(httpx.ReadError):
    """A reply longer than the cap (its text names the cap)."""


class _Capped(httpx.SyncByteStream):
    def __init__(self, inner: Any, limit: int, encoding: str, request: httpx.Request) -> None:
        self._inner = inner
        self._limit = limit
        self._request = request
        self._inflater = zlib.decompressobj(_WBITS[encoding]) if encoding in _WBITS else None

    def _too_large(self) -> ReplyTooLarge:
        return ReplyTooLarge(f"the reply is over {self._limit} bytes", request=self._request)

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        for chunk in self._inner:
            if self._inflater is not None:
                try:
                    chunk = self._inflater.decompress(chunk, self._limit + 1 - size)
                except zlib.error as exc:
                    raise httpx.DecodingError(str(exc), request=self._request) from None
                if self._inflater.unconsumed_tail:
                    raise self._too_large()
            size += len(chunk)
            if size > self._limit:
                raise self._too_large()
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CappedTransport(httpx.BaseTransport):
    """httpx's own transport, each reply's body cut off with ReplyTooLarge past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = self._inner.handle_request(request)
        declared = response.headers.get("Content-Length", "")
        if declared.strip().isdigit() and int(declared) > self.limit:
            response.close()
            raise ReplyTooLarge(
                f"the reply is over {self.limit} bytes (Content-Length {declared})",
                request=request,
            )
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-encoding"]
        return httpx.Response(
            status_code=response.status_code,
            headers=headers if encoding in _WBITS else response.headers,
            stream=_Capped(response.stream, self.limit, encoding, request),
            extensions=response.extensions,
            request=request,
        )

    def close(self) -> None:
        self._inner.close()
