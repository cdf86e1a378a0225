"""Tool servers the capture tests drive (importable by a child process too)."""
