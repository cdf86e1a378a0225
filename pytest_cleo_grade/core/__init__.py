"""The pure core every other folder stands on: errors, settings, the data model, the letter
scale, expectations, safe file primitives, text escaping and the JSON Schemas.

Nothing here imports another folder of the package, pytest, SQLite, sockets or HTTP.
"""

from __future__ import annotations
