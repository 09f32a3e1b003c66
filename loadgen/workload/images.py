"""Images for vision requests, as data URLs: generated PNGs (standard library only) or local files.

A generated image is an 8-bit RGB PNG of the size asked for, with the structure of a picture
rather than of a test pattern: colour gradients across it and blocks of low-amplitude noise over
about two fifths of it, so that it compresses to about 1 byte a pixel (a photo's PNG is 1-3; a flat
image would be a few hundred bytes, which a server decodes and moves far faster than a real one).

Every image is different, as a user's would be (a server with a multimodal cache, vLLM's or
SGLang's, would otherwise skip the vision encoder for every repeat): its first :data:`STAMP_ROWS`
rows are noise drawn from ``(seed, index)``. The rest (the "body", the costly part to compress)
is one of :data:`BODY_VARIANTS` per size, kept in a small LRU cache, and the PNG is put together by
joining the two deflate streams (the stamp's ends on a full flush, so the body's stands on its own)
and combining their Adler-32 checksums. A 1024x1024 image costs some 40 ms the first time a size and
variant are seen and about 4 ms after that (the stamp, the join and the CRC): scenarios whose sizes
take a few values reuse the cache; sizes drawn over a continuous range make each body afresh.
"""

from __future__ import annotations

import base64
import random
import struct
import zlib
from functools import lru_cache
from pathlib import Path

MAX_SIDE = 16384
STAMP_ROWS = 8
BODY_VARIANTS = 4
BLOCK = 32  # pixels on a side of a noise block
NOISE_SHARE = 0.4
LEVEL = 1  # zlib's fastest: the noise does not compress anyway, and the gradients compress at any level
_ADLER_BASE = 65521
# noise of 64 levels around mid-grey: about 6 of every 8 bits survive compression
_NOISE_TABLE = bytes(96 + (b >> 2) for b in range(256))

MIME_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
}


def png_image(width: int, height: int, seed: int, index: int) -> bytes:
    """A PNG of ``width`` x ``height`` pixels, the same for the same arguments and different for
    another ``index``. Raises ValueError for a side below 1 or above :data:`MAX_SIDE`."""
    for name, side in (("width", width), ("height", height)):
        if not 1 <= side <= MAX_SIDE:
            raise ValueError(f"image {name} must be 1..{MAX_SIDE} pixels, got {side}")
    stamp_rows = min(STAMP_ROWS, height)
    rng = random.Random(f"{seed}:image:{width}x{height}:{index}")
    row = 3 * width
    noise = rng.randbytes(row * stamp_rows).translate(_NOISE_TABLE)
    stamp = b"".join(b"\x00" + noise[y * row : (y + 1) * row] for y in range(stamp_rows))
    body, body_adler, body_len = _body(width, height, seed, index % BODY_VARIANTS)
    if body_len == 0:
        head = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
        deflated = head.compress(stamp) + head.flush(zlib.Z_FINISH)
        adler = zlib.adler32(stamp)
    else:
        head = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
        deflated = head.compress(stamp) + head.flush(zlib.Z_FULL_FLUSH) + body
        adler = _adler32_combine(zlib.adler32(stamp), body_adler, body_len)
    idat = b"\x78\x01" + deflated + struct.pack(">I", adler)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def mime_type(path: Path) -> str | None:
    """The image MIME type of a file name, or None for an extension that names no image format."""
    return MIME_TYPES.get(path.suffix.lower())


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@lru_cache(maxsize=16)
def _body(width: int, height: int, seed: int, variant: int) -> tuple[bytes, int, int]:
    """Rows ``STAMP_ROWS..height`` (filter bytes included), deflated as a stream of their own, with
    the Adler-32 and length of the raw rows."""
    rows = height - min(STAMP_ROWS, height)
    if rows == 0:
        return b"", 1, 0
    rng = random.Random(f"{seed}:image-body:{width}x{height}:{variant}")
    row_len = 3 * width
    phase_r, phase_g, phase_b = rng.randrange(256), rng.randrange(256), rng.randrange(256)
    span = max(1, width - 1)
    red = bytes((phase_r + 200 * x // span) & 255 for x in range(width))
    blue = bytes((phase_b + 255 - 160 * x // span) & 255 for x in range(width))
    noise = rng.randbytes(row_len * min(rows, 4 * BLOCK)).translate(_NOISE_TABLE)
    blocks_x = (width + BLOCK - 1) // BLOCK
    line = bytearray(row_len)
    line[0::3] = red
    line[2::3] = blue
    out = bytearray()
    noisy: list[tuple[int, int]] = []
    for y in range(rows):
        if y % BLOCK == 0:
            noisy = [
                (3 * bx * BLOCK, 3 * min(width, (bx + 1) * BLOCK))
                for bx in range(blocks_x)
                if rng.random() < NOISE_SHARE
            ]
        line[1::3] = bytes(((phase_g + 255 * y // max(1, rows)) & 255,)) * width
        base = row_len * (y % (4 * BLOCK)) if rows > 1 else 0
        # a noise row is a slice of the noise buffer, shifted per block row so blocks differ
        shift = (y // BLOCK * 7 * BLOCK * 3) % row_len
        row = bytearray(line)
        for start, end in noisy:
            lo = base + (start + shift) % row_len
            piece = noise[lo : lo + end - start]
            row[start : start + len(piece)] = piece
        out += b"\x00"
        out += row
    raw = bytes(out)
    comp = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
    return comp.compress(raw) + comp.flush(zlib.Z_FINISH), zlib.adler32(raw), len(raw)


def _adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """The Adler-32 of A + B from those of A and B (B's taken from the start value 1), as zlib's
    ``adler32_combine`` (which Python's zlib does not expose) computes it."""
    rem = len2 % _ADLER_BASE
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_BASE
    sum1 += (adler2 & 0xFFFF) + _ADLER_BASE - 1
    sum2 += ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + _ADLER_BASE - rem
    sum1 %= _ADLER_BASE
    sum2 %= _ADLER_BASE
    return sum1 | (sum2 << 16)


__all__ = ["MAX_SIDE", "data_url", "mime_type", "png_image"]
