"""Compression codecs of record payloads, byte-compatible with Kafka (``compress/*.java``, ``CompressionType``).

A codec compresses the records section of a v2 batch (everything after byte 61) or the value of a legacy
v0/v1 wrapper message. The codec id lives in bits 0-2 of the batch/message attributes::

    0 none   1 gzip   2 snappy   3 lz4   4 zstd        (5, 6, 7 are unassigned and rejected)

zstd is illegal with magic 0 and 1; both directions raise :class:`CompressionError`.

Levels (``compression.<codec>.level``): gzip 1..9 or -1 (default -1 = zlib's 6); lz4 1..17 (default 9);
zstd -131072..22 (default 3); snappy and none have no level (a given level is ignored). A level out of
range raises :class:`ConfigError`.

gzip (JDK ``GZIPOutputStream``/``GZIPInputStream``)
    One RFC 1952 member, written exactly as JDK 17 writes it::

        1f 8b 08 00 | 00 00 00 00 | 00 ff | raw deflate | crc32 LE | isize LE
        magic CM FLG   mtime 0       XFL OS(255 = unknown)            (length mod 2**32)

    Reading accepts any valid gzip stream, including concatenated members. Like the JDK, bytes after a
    member are decoded as another member if they are at least a 10-byte header starting ``1f 8b 08``, and
    are otherwise ignored. Empty input is an error.

snappy (xerial snappy-java ``SnappyOutputStream``/``SnappyInputStream``; all ints big-endian)
    ::

        82 53 4e 41 50 50 59 00 | 00 00 00 01 | 00 00 00 01     16-byte header: magic "\\x82SNAPPY\\0",
                                  version 1     min. compat 1     written even for empty input
        then per 32 KiB of input:  int32 compressed length | raw snappy block

    Reading: if the input is at least 16 bytes and starts with the 8 magic bytes it is xerial framed
    (version must be >= 1); the magic again where a block length is expected starts a concatenated
    stream whose 16-byte header is skipped. Otherwise the whole input is one raw snappy block (what
    ``Snappy.compress(byte[])`` writes). Empty input is an error.

lz4 (Kafka's own ``Lz4BlockOutputStream``/``Lz4BlockInputStream``, a subset of LZ4 frame format 1.5.1;
all ints little-endian)
    ::

        04 22 4d 18 | FLG | BD | [content size, 8 bytes] | HC | blocks... | 00 00 00 00
        magic 0x184D2204                                             end mark

    * FLG: bits 0-1 reserved (0), bit 2 content checksum, bit 3 content size, bit 4 block checksum,
      bit 5 block independence (must be 1), bits 6-7 version (must be 1). Written: 0x60.
    * BD: bits 4-6 block max size code 4..7 (64 KiB, 256 KiB, 1 MiB, 4 MiB = 1 << (2n + 8)), other bits
      0. Written: 0x40 (64 KiB blocks).
    * HC = (xxh32(FLG..BD [+ content size], seed 0) >> 8) & 0xFF, so ``60 40`` -> 0x82. Kafka's old bug,
      kept for magic 0: the writer hashes magic+FLG+BD (bytes 0..5; ``60 40`` -> 0x1A) and the reader does
      not check HC. For magic >= 1 a wrong HC is "Stream frame descriptor corrupted".
    * block: int32 size | data [| int32 xxh32 of data if FLG bit 4]. High bit of size set = data stored
      uncompressed (written when LZ4 does not shrink the block); otherwise one raw LZ4 block. A size
      above the max block size is "Block size N exceeded max: M".
    * end mark: int32 0, then the 4-byte content checksum if FLG bit 2 (skipped, not verified, as Kafka
      does). Bytes after the end mark are ignored, as Kafka's stream stops reading there.
    * Level 9 (the default) uses LZ4's fast compressor; any other level the high-compression one.

zstd (zstd-jni ``ZstdInputStream``/``ZstdOutputStream``)
    Standard zstd frames (RFC 8878). Reading accepts concatenated and skippable frames and frames without
    a content size; a truncated frame is an error; empty input decodes to nothing (as zstd-jni does).

Errors: any malformed input raises :class:`CompressionError` with ``position`` = offset in the payload
of the structure (member, block, frame) where decoding failed. ``max_output_bytes`` bounds the
decompressed size: a payload that would decode to more raises :class:`CompressionError` before more
than a bounded overshoot (one block at most) is held in memory.
"""
from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.block
import xxhash
import zstandard

from storage_engine.errors import CompressionError, ConfigError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}

# Levels, as Kafka's ``<Codec>Compression`` classes define them: (default, min, max).
GZIP_DEFAULT_LEVEL, GZIP_MIN_LEVEL, GZIP_MAX_LEVEL = -1, 1, 9
LZ4_DEFAULT_LEVEL, LZ4_MIN_LEVEL, LZ4_MAX_LEVEL = 9, 1, 17
ZSTD_DEFAULT_LEVEL, ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL = 3, -131072, 22

# The first magic that allows zstd (record batch v2).
ZSTD_MIN_MAGIC = 2

_INT32_BE = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")

# gzip: JDK 17's GZIPOutputStream header (mtime 0, XFL 0, OS 255) and its trailer (crc32, isize).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_MEMBER_PREFIX = b"\x1f\x8b\x08"
_GZIP_HEADER_BYTES = 10
_GZIP_TRAILER = struct.Struct("<II")
_GZIP_WBITS = 31  # zlib: gzip wrapper only, 32 KiB window
_RAW_DEFLATE_WBITS = -15

# snappy: xerial framing.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024
# A snappy element yields at most 64 bytes from 3 input bytes, so a block declaring more than this many
# times its own size is corrupt; checking first avoids allocating what a forged length asks for.
_SNAPPY_MAX_EXPANSION = 32

# lz4: Kafka's frame.
LZ4_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian
LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_FLG = 0x60  # version 1, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # block max size code 4 = 64 KiB
_LZ4_FLG_CONTENT_CHECKSUM = 0x04
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_INDEPENDENT = 0x20
_LZ4_STORED = 0x80000000  # high bit of a block size: data stored uncompressed
_LZ4_PREMATURE_EOS = "lz4: Stream ended prematurely"


def _lz4_header_checksum(descriptor: bytes | memoryview) -> int:
    return (xxhash.xxh32_intdigest(descriptor, 0) >> 8) & 0xFF


_LZ4_DESCRIPTOR = bytes((_LZ4_FLG, _LZ4_BD))
LZ4_FRAME_HEADER = LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes((_lz4_header_checksum(_LZ4_DESCRIPTOR),))
LZ4_FRAME_HEADER_V0 = LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes((_lz4_header_checksum(LZ4_MAGIC + _LZ4_DESCRIPTOR),))
_LZ4_END_MARK = b"\x00\x00\x00\x00"

# zstd frame structure, walked to find frame ends and to bound each step's output.
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_ZSTD_BLOCK_MAX_BYTES = 128 * 1024
_ZSTD_BLOCK_RLE = 1
_ZSTD_BLOCK_COMPRESSED = 2
_ZSTD_BLOCK_RESERVED = 3
_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
_ZSTD_CONTENT_SIZE_BYTES = (0, 2, 4, 8)


def compress(codec: int, data: bytes | memoryview, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` as Kafka writes it for a batch of ``magic``.

    ``level`` None means the codec's default. Raises :class:`CompressionError` for an unknown codec or
    zstd with magic < 2, :class:`ConfigError` for a level out of the codec's range.
    """
    view = _byte_view(data)
    if codec == NONE:
        return bytes(view)
    if codec == GZIP:
        return _gzip_compress(view, _check_level("compression.gzip.level", level, GZIP_DEFAULT_LEVEL,
                                                 GZIP_MIN_LEVEL, GZIP_MAX_LEVEL, also=GZIP_DEFAULT_LEVEL))
    if codec == SNAPPY:
        return _snappy_compress(view)
    if codec == LZ4:
        return _lz4_compress(view, _check_level("compression.lz4.level", level, LZ4_DEFAULT_LEVEL,
                                                LZ4_MIN_LEVEL, LZ4_MAX_LEVEL), magic)
    if codec == ZSTD:
        _check_zstd_magic(magic)
        return _zstd_compress(view, _check_level("compression.zstd.level", level, ZSTD_DEFAULT_LEVEL,
                                                 ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL))
    raise _unknown_codec(codec)


def decompress(codec: int, data: bytes | memoryview, *, magic: int = 2,
               max_output_bytes: int | None = None) -> bytes:
    """Decompress a ``codec`` payload of a batch of ``magic``.

    Raises :class:`CompressionError` for an unknown codec, zstd with magic < 2, any malformed input, or
    output larger than ``max_output_bytes`` (None = unbounded).
    """
    view = _byte_view(data)
    if codec == NONE:
        _check_output_size("none", len(view), max_output_bytes, 0)
        return bytes(view)
    if codec == GZIP:
        return _gzip_decompress(view, max_output_bytes)
    if codec == SNAPPY:
        return _snappy_decompress(view, max_output_bytes)
    if codec == LZ4:
        return _lz4_decompress(view, magic, max_output_bytes)
    if codec == ZSTD:
        _check_zstd_magic(magic)
        return _zstd_decompress(view, max_output_bytes)
    raise _unknown_codec(codec)


# -- shared helpers -------------------------------------------------------------------------------------

def _byte_view(data: bytes | memoryview) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _unknown_codec(codec: int) -> CompressionError:
    return CompressionError(f"unknown compression codec id {codec} (known: {sorted(CODEC_NAMES)})")


def _check_zstd_magic(magic: int) -> None:
    if magic < ZSTD_MIN_MAGIC:
        raise CompressionError(f"zstd is not allowed with magic {magic} (needs magic >= {ZSTD_MIN_MAGIC})")


def _check_level(key: str, level: int | None, default: int, low: int, high: int,
                 also: int | None = None) -> int:
    if level is None:
        return default
    if not (low <= level <= high or level == also):
        allowed = f"{low}..{high}" + ("" if also is None else f" or {also}")
        raise ConfigError(f"{key} = {level} is out of range; allowed: {allowed}")
    return level


def _check_output_size(name: str, total: int, max_output_bytes: int | None, position: int) -> None:
    if max_output_bytes is not None and total > max_output_bytes:
        raise CompressionError(f"{name}: payload decompresses to more than max_output_bytes "
                               f"({max_output_bytes})", position=position)


def _join(parts: list) -> bytes:
    """Concatenate decoded pieces, without copying a lone ``bytes`` piece."""
    return parts[0] if len(parts) == 1 and type(parts[0]) is bytes else b"".join(parts)


# -- gzip -----------------------------------------------------------------------------------------------

def _gzip_compress(view: memoryview, level: int) -> bytes:
    body = zlib.compress(view, level, _RAW_DEFLATE_WBITS)
    return b"".join((_GZIP_HEADER, body, _GZIP_TRAILER.pack(zlib.crc32(view), len(view) & 0xFFFFFFFF)))


def _gzip_decompress(view: memoryview, max_output_bytes: int | None) -> bytes:
    end = len(view)
    if end == 0:
        raise CompressionError("gzip: empty payload", position=0)
    parts: list = []
    total = 0
    pos = 0
    while True:
        member = zlib.decompressobj(_GZIP_WBITS)
        # With a bound, ask for one byte more than allowed: getting it proves the bound is exceeded.
        max_length = 0 if max_output_bytes is None else max_output_bytes - total + 1
        try:
            out = member.decompress(view[pos:], max_length)
        except zlib.error as e:
            raise CompressionError(f"gzip: {e}", position=pos) from None
        total += len(out)
        _check_output_size("gzip", total, max_output_bytes, pos)
        if not member.eof:
            raise CompressionError("gzip: truncated member", position=end)
        parts.append(out)
        pos = end - len(member.unused_data)
        if end - pos < _GZIP_HEADER_BYTES or view[pos:pos + len(_GZIP_MEMBER_PREFIX)] != _GZIP_MEMBER_PREFIX:
            return _join(parts)  # end of input, or trailing bytes the JDK also ignores


# -- snappy ---------------------------------------------------------------------------------------------

def _snappy_compress(view: memoryview) -> bytes:
    parts: list = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_BYTES])
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(view: memoryview, max_output_bytes: int | None) -> bytes:
    end = len(view)
    if end == 0:
        raise CompressionError("snappy: empty payload", position=0)
    if end < len(XERIAL_HEADER) or view[:len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(_snappy_block(view, 0, max_output_bytes))
    parts: list = []
    total = 0
    pos = 0
    while pos < end:
        if view[pos:pos + len(XERIAL_MAGIC)] == XERIAL_MAGIC:  # stream header (first or concatenated)
            if end - pos < len(XERIAL_HEADER):
                raise CompressionError("snappy: truncated xerial header", position=pos)
            (version,) = _INT32_BE.unpack_from(view, pos + len(XERIAL_MAGIC))
            if version < 1:
                raise CompressionError(f"snappy: xerial version {version} is not supported", position=pos)
            pos += len(XERIAL_HEADER)
            continue
        if end - pos < _INT32_BE.size:
            raise CompressionError("snappy: truncated xerial block length", position=pos)
        (size,) = _INT32_BE.unpack_from(view, pos)
        start = pos + _INT32_BE.size
        if size < 0 or start + size > end:
            raise CompressionError(f"snappy: xerial block of {size} bytes does not fit the payload",
                                   position=pos)
        budget = None if max_output_bytes is None else max_output_bytes - total
        block = _snappy_block(view[start:start + size], start, budget)
        total += len(block)
        parts.append(block)
        pos = start + size
    return b"".join(parts)


def _snappy_block(block: memoryview, position: int, max_output_bytes: int | None) -> cramjam.Buffer:
    """One raw snappy block (varint uncompressed length, then elements); returns a bytes-like object."""
    try:
        length = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as e:
        raise CompressionError(f"snappy: {e}", position=position) from None
    if length > _SNAPPY_MAX_EXPANSION * len(block):
        raise CompressionError(f"snappy: block of {len(block)} bytes declares {length} uncompressed bytes",
                               position=position)
    _check_output_size("snappy", length, max_output_bytes, position)
    try:
        return cramjam.snappy.decompress_raw(block)
    except cramjam.DecompressionError as e:
        raise CompressionError(f"snappy: {e}", position=position) from None


# -- lz4 ------------------------------------------------------------------------------------------------

def _lz4_compress(view: memoryview, level: int, magic: int) -> bytes:
    if level == LZ4_DEFAULT_LEVEL:
        options: dict[str, object] = {"mode": "default"}
    else:
        options = {"mode": "high_compression", "compression": level}
    parts: list = [LZ4_FRAME_HEADER_V0 if magic == 0 else LZ4_FRAME_HEADER]
    pack = _UINT32_LE.pack
    for start in range(0, len(view), LZ4_BLOCK_BYTES):
        chunk = view[start:start + LZ4_BLOCK_BYTES]
        block = lz4.block.compress(chunk, store_size=False, **options)
        if len(block) >= len(chunk):
            parts.append(pack(len(chunk) | _LZ4_STORED))
            parts.append(chunk)
        else:
            parts.append(pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(view: memoryview, magic: int, max_output_bytes: int | None) -> bytes:
    end = len(view)
    if end < 6:
        raise CompressionError(_LZ4_PREMATURE_EOS, position=end)
    if view[:4] != LZ4_MAGIC:
        raise CompressionError("lz4: Stream unsupported (invalid magic bytes)", position=0)
    flg, bd = view[4], view[5]
    if flg & 0x03:
        raise CompressionError("lz4: Reserved bits must be 0", position=4)
    if not flg & _LZ4_FLG_INDEPENDENT:
        raise CompressionError("lz4: Dependent block stream is unsupported", position=4)
    if flg >> 6 != 1:
        raise CompressionError(f"lz4: Version {flg >> 6} is unsupported", position=4)
    if bd & 0x0F:
        raise CompressionError("lz4: Reserved2 field must be 0", position=5)
    size_code = (bd >> 4) & 0x07
    if size_code < 4:
        raise CompressionError("lz4: Block size value must be between 4 and 7", position=5)
    if bd & 0x80:
        raise CompressionError("lz4: Reserved3 field must be 0", position=5)
    max_block = 1 << (2 * size_code + 8)
    pos = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0)  # content size: covered by HC, otherwise skipped
    if pos >= end:
        raise CompressionError(_LZ4_PREMATURE_EOS, position=end)
    # Magic 0: Kafka's old writers hashed the wrong bytes, so Kafka does not check HC at all.
    if magic >= 1 and view[pos] != _lz4_header_checksum(view[4:pos]):
        raise CompressionError("lz4: Stream frame descriptor corrupted", position=pos)
    pos += 1
    block_checksum = bool(flg & _LZ4_FLG_BLOCK_CHECKSUM)
    parts: list = []
    total = 0
    while True:
        if end - pos < 4:
            raise CompressionError(_LZ4_PREMATURE_EOS, position=end)
        (word,) = _UINT32_LE.unpack_from(view, pos)
        block_pos = pos
        pos += 4
        size = word & ~_LZ4_STORED
        if size == 0:
            if flg & _LZ4_FLG_CONTENT_CHECKSUM and end - pos < 4:
                raise CompressionError(_LZ4_PREMATURE_EOS, position=end)
            return _join(parts)
        if size > max_block:
            raise CompressionError(f"lz4: Block size {size} exceeded max: {max_block}", position=block_pos)
        if end - pos < size + 4 * block_checksum:
            raise CompressionError(_LZ4_PREMATURE_EOS, position=end)
        data = view[pos:pos + size]
        pos += size
        if block_checksum:
            (expected,) = _UINT32_LE.unpack_from(view, pos)
            pos += 4
            if xxhash.xxh32_intdigest(data, 0) != expected:
                raise CompressionError("lz4: Block checksum mismatch", position=block_pos)
        if not word & _LZ4_STORED:
            try:
                data = lz4.block.decompress(data, uncompressed_size=max_block)
            except lz4.block.LZ4BlockError as e:
                raise CompressionError(f"lz4: {e}", position=block_pos) from None
        total += len(data)
        _check_output_size("lz4", total, max_output_bytes, block_pos)
        parts.append(data)


# -- zstd -----------------------------------------------------------------------------------------------

def _zstd_compress(view: memoryview, level: int) -> bytes:
    return zstandard.ZstdCompressor(level=level).compress(view)


def _zstd_decompress(view: memoryview, max_output_bytes: int | None) -> bytes:
    """Decode frame by frame, walking block headers to find each frame's end (so truncation is caught).

    Unbounded: one decompress call per frame. Bounded: blocks are fed in groups whose worst-case output
    (raw/RLE: their stated size, compressed: 128 KiB) fits the remaining budget, so at most one block's
    output can be produced beyond ``max_output_bytes`` before the bound is detected.
    """
    end = len(view)
    dctx = zstandard.ZstdDecompressor()
    parts: list = []
    total = 0
    pos = 0
    while pos < end:
        frame_pos = pos
        if end - pos < 4:
            raise CompressionError("zstd: truncated frame magic", position=pos)
        (magic,) = _UINT32_LE.unpack_from(view, pos)
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if end - pos < 8:
                raise CompressionError("zstd: truncated skippable frame", position=pos)
            pos += 8 + _UINT32_LE.unpack_from(view, pos + 4)[0]
            if pos > end:
                raise CompressionError("zstd: truncated skippable frame", position=frame_pos)
            continue
        if magic != _ZSTD_MAGIC:
            raise CompressionError(f"zstd: unknown frame magic 0x{magic:08x}", position=pos)
        if end - pos < 5:
            raise CompressionError("zstd: truncated frame header", position=pos)
        descriptor = view[pos + 4]
        single_segment = (descriptor >> 5) & 1
        has_checksum = (descriptor >> 2) & 1
        content_size_bytes = _ZSTD_CONTENT_SIZE_BYTES[descriptor >> 6]
        if single_segment and not content_size_bytes:
            content_size_bytes = 1  # single-segment frames always state their size
        window_bytes = 0 if single_segment else 1
        block_pos = pos + 5 + window_bytes + _ZSTD_DICT_ID_BYTES[descriptor & 3] + content_size_bytes
        frame = dctx.decompressobj()
        fed = pos
        bound = 0
        while True:
            if end - block_pos < 3:
                raise CompressionError("zstd: truncated frame", position=frame_pos)
            header = view[block_pos] | view[block_pos + 1] << 8 | view[block_pos + 2] << 16
            last, block_type, block_size = header & 1, (header >> 1) & 3, header >> 3
            if block_type == _ZSTD_BLOCK_RESERVED:
                raise CompressionError("zstd: reserved block type", position=block_pos)
            block_pos += 3 + (1 if block_type == _ZSTD_BLOCK_RLE else block_size)
            bound += _ZSTD_BLOCK_MAX_BYTES if block_type == _ZSTD_BLOCK_COMPRESSED else block_size
            if last:
                block_pos += 4 * has_checksum
            if block_pos > end:
                raise CompressionError("zstd: truncated frame", position=frame_pos)
            if last or (max_output_bytes is not None and total + bound > max_output_bytes):
                try:
                    out = frame.decompress(view[fed:block_pos])
                except zstandard.ZstdError as e:
                    raise CompressionError(f"zstd: {e}", position=frame_pos) from None
                total += len(out)
                _check_output_size("zstd", total, max_output_bytes, frame_pos)
                parts.append(out)
                fed = block_pos
                bound = 0
            if last:
                break
        if not frame.eof or frame.unused_data:  # the walk and libzstd must agree on where the frame ends
            raise CompressionError("zstd: frame does not end after its last block", position=frame_pos)
        pos = block_pos
    return _join(parts)
