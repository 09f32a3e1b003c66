"""Bytes in, values out: the SSE decoder (``sse``), the OpenAI response decoder (``stream``) and the
error classes of one call (``errors``). Pure: no sockets, files, threads or clocks."""
