"""Images in a prompt: their size read from the image header, and the prefill tokens they cost.

An image reaches the simulator as a data URL (``data:image/png;base64,...``; JPEG too), never as a
link: an ``http(s)://`` or ``file:`` URL is refused (:class:`ImageError`), nothing is downloaded.
Only the header is read: a PNG's IHDR chunk (width, height), a JPEG's first start-of-frame marker
(SOF0 baseline, SOF2 progressive and the other SOFn). The format is taken from the bytes, not the
MIME type. Bytes that are neither, or a header cut short, raise :class:`ImageError`.

Tokens (:func:`image_tokens`), Qwen2-VL's rule (Kimi-VL and most ViT front ends work the same way):
the image is resized, keeping its aspect ratio, so its pixel count lies within
[:data:`MIN_PIXELS`, :data:`MAX_PIXELS`] (4*28*28 .. 1280*28*28) and each side is a multiple of 28
(``smart_resize``); it is cut into 14-px patches merged 2x2, so it costs ``(h/28) * (w/28)``
tokens, plus 2 for the vision start/end markers. A 448x448 image costs 16*16 + 2 = 258 tokens; any
image at most 1280 + 2 (a very thin one keeps one 28-px row and a long side cut to fit).

Prefix cache: an image is named by a hash of its data URL, so prompts with different images never
share the blocks from the first image on (:func:`image_marker`).
"""

from __future__ import annotations

import binascii
import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

PATCH_PX = 28  # 14-px patches merged 2x2
MIN_PIXELS = 4 * PATCH_PX * PATCH_PX  # 3,136
MAX_PIXELS = 1280 * PATCH_PX * PATCH_PX  # 1,003,520
MARKER_TOKENS = 2  # <|vision_start|> and <|vision_end|>
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (all SOFn but DHT C4, JPG C8 and DAC CC, which share the range)
JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
NOT_FETCHED = "image URLs are not fetched by the simulator; send data URLs (data:image/png;base64,...)"


class ImageError(ValueError):
    """The image cannot be read; the message says why (the caller adds which part)."""


@dataclass(frozen=True, slots=True)
class Image:
    width: int
    height: int
    tokens: int  # prefill tokens (image_tokens)
    key: str  # hex hash of the data URL (prefix-cache identity)


def image_tokens(width: int, height: int) -> int:
    """Prefill tokens of a ``width`` x ``height`` image (Qwen2-VL's smart_resize; module doc)."""
    f = PATCH_PX
    h_bar = max(f, round(height / f) * f)
    w_bar = max(f, round(width / f) * f)
    if h_bar * w_bar > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h_bar = max(f, math.floor(height / beta / f) * f)
        w_bar = max(f, math.floor(width / beta / f) * f)
        # a very thin image: the short side stays one patch row, the long side shrinks to fit
        w_bar = min(w_bar, max(f, MAX_PIXELS // h_bar // f * f))
        h_bar = min(h_bar, max(f, MAX_PIXELS // w_bar // f * f))
    elif h_bar * w_bar < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / f) * f
        w_bar = math.ceil(width * beta / f) * f
    return (h_bar // f) * (w_bar // f) + MARKER_TOKENS


@lru_cache(maxsize=256)
def read_image(url: str) -> Image:
    """The image a data URL carries (cached by URL: a prompt's images are read once per request
    even though its token count and its cache blocks both need them)."""
    if not url.startswith("data:"):
        raise ImageError(NOT_FETCHED)
    meta, sep, payload = url.partition(",")
    if not sep or not meta.endswith(";base64"):
        raise ImageError("a data URL 'data:image/...;base64,<data>' is expected")
    try:
        data = binascii.a2b_base64(payload)
    except binascii.Error as exc:
        raise ImageError(f"the base64 data does not decode ({exc})") from None
    width, height = image_size(data)
    key = hashlib.blake2b(url.encode("ascii", "replace"), digest_size=8).hexdigest()
    return Image(width, height, image_tokens(width, height), key)


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG or JPEG header; :class:`ImageError` if neither or cut short."""
    if data.startswith(PNG_SIGNATURE):
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ImageError("a PNG without its IHDR header")
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    elif data.startswith(b"\xff\xd8"):
        width, height = _jpeg_size(data)
    else:
        raise ImageError("not a PNG or JPEG image")
    if width <= 0 or height <= 0:
        raise ImageError(f"an image of {width}x{height} pixels")
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            raise ImageError(f"a JPEG with a broken marker at byte {i}")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # standalone markers: no length
            i += 2
            continue
        if marker == 0xD9:
            break
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in JPEG_SOF:
            if i + 9 > n:
                break
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        i += 2 + length
    raise ImageError("a JPEG without a start-of-frame (SOF) header")


def image_marker(url: str, chars_per_token: float) -> str:
    """The image in a prompt's prefix-cache stream: its hash, padded to as many characters as its
    tokens take (so blocks after it line up with token counts)."""
    try:
        image = read_image(url)
    except ImageError:
        return ""
    width = max(1, round(image.tokens * chars_per_token))
    return ("<|image:" + image.key + "|>").ljust(width, "~")


def part_image_url(part: object) -> str | None:
    """The URL of an image content part (chat ``image_url``, Responses ``input_image``); None for
    any other part."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "image_url":
        ref = part.get("image_url")
        url = ref.get("url") if isinstance(ref, dict) else ref
    elif kind == "input_image":
        url = part.get("image_url")
    else:
        return None
    return url if isinstance(url, str) else ""


def prompt_images(messages: list[Any]) -> list[Image]:
    """Every image in chat ``messages`` (content part lists), in order; :class:`ImageError` naming
    the part (``messages[i].content[j]: ...``) for one that cannot be read."""
    out: list[Image] = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            url = part_image_url(part)
            if url is None:
                continue
            try:
                out.append(read_image(url))
            except ImageError as exc:
                raise ImageError(f"messages[{i}].content[{j}]: {exc}") from None
    return out
