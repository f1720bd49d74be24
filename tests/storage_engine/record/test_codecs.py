"""Tests of storage_engine.record.codecs: round trips, agreement with kafka-python, Kafka's Lz4CompressionTest,
framing byte layouts, decompression bounds and corrupt input (which must raise CompressionError only)."""
from __future__ import annotations

import array
import gzip
import random
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from storage_engine.record import codecs
from storage_engine.record.codecs import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from storage_engine.errors import CompressionError, ConfigError

pytestmark = pytest.mark.unit

CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)
# (codec, magic) pairs Kafka allows.
CODEC_MAGICS = [(codec, magic) for codec in CODECS for magic in (0, 1, 2) if not (codec == ZSTD and magic < 2)]
SIZES = (0, 1, 1000, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024, 64 * 1024 + 1, 200_000)

FUZZ = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def random_bytes(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def text_bytes(size: int, seed: int = 0) -> bytes:
    """Compressible data: words drawn from a small vocabulary."""
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randrange(1, 8)).hex().encode() for _ in range(300)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


payloads = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=40), st.integers(0, 3000)),
)


def _assert_only_compression_error(codec: int, data: bytes, magic: int, max_output_bytes=None) -> None:
    try:
        out = decompress(codec, data, magic=magic, max_output_bytes=max_output_bytes)
    except CompressionError:
        return
    assert type(out) is bytes


def _lz4_blocks(frame: bytes):
    """(size word, payload) of each block of a frame written by codecs (7-byte header, no checksums)."""
    blocks: list[tuple[int, bytes]]
    pos, blocks = 7, []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        if word == 0:
            assert pos + 4 == len(frame)
            return blocks
        size = word & 0x7FFFFFFF
        blocks.append((word, frame[pos + 4:pos + 4 + size]))
        pos += 4 + size


def _xerial_blocks(stream: bytes):
    assert stream[:16] == codecs.XERIAL_HEADER
    pos, blocks = 16, []
    while pos < len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        blocks.append(stream[pos + 4:pos + 4 + size])
        pos += 4 + size
    assert pos == len(stream)
    return blocks


# -- registry ---------------------------------------------------------------------------------------------

def test_codec_ids_and_names():
    assert (NONE, GZIP, SNAPPY, LZ4, ZSTD) == (0, 1, 2, 3, 4)
    assert codecs.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    assert codecs.CODEC_IDS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec_id_is_rejected_naming_it(codec):
    for call in (compress, decompress):
        with pytest.raises(CompressionError, match=rf"codec id {codec}\b"):
            call(codec, b"abc")


# -- round trips ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec,magic", CODEC_MAGICS)
@pytest.mark.parametrize("size", SIZES)
def test_round_trip_explicit_sizes(codec, magic, size):
    for data in (random_bytes(size, seed=size), text_bytes(size, seed=size)):
        compressed = compress(codec, data, magic=magic)
        assert type(compressed) is bytes
        assert decompress(codec, compressed, magic=magic) == data
        assert decompress(codec, compressed, magic=magic, max_output_bytes=size) == data


@FUZZ
@given(codec_magic=st.sampled_from(CODEC_MAGICS), data=payloads)
def test_round_trip_property(codec_magic, data):
    codec, magic = codec_magic
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_bytearray_and_wide_formats(codec):
    data = text_bytes(70_000)
    backing = b"xx" + data + b"yy"
    view = memoryview(backing)[2:-2]
    assert decompress(codec, compress(codec, view)) == data
    assert decompress(codec, compress(codec, bytearray(data))) == data  # type: ignore[arg-type]  # a bytearray, which the codecs accept
    compressed = compress(codec, data)
    assert decompress(codec, memoryview(b"_" + compressed)[1:]) == data
    assert decompress(codec, bytearray(compressed)) == data  # type: ignore[arg-type]  # a bytearray, which the codecs accept
    wide = array.array("H", range(1000))
    assert decompress(codec, compress(codec, memoryview(wide))) == wide.tobytes()


def test_none_returns_bytes_unchanged():
    data = memoryview(b"plain records")
    assert compress(NONE, data) == b"plain records" and type(compress(NONE, data)) is bytes
    assert decompress(NONE, data) == b"plain records" and type(decompress(NONE, data)) is bytes


# -- levels -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec,level", [
    (GZIP, -1), (GZIP, 1), (GZIP, 5), (GZIP, 9),
    (LZ4, 1), (LZ4, 9), (LZ4, 12), (LZ4, 17),
    (ZSTD, -131072), (ZSTD, -5), (ZSTD, 0), (ZSTD, 3), (ZSTD, 19),
])
def test_valid_levels_round_trip(codec, level):
    data = text_bytes(100_000)
    assert decompress(codec, compress(codec, data, level=level)) == data


@pytest.mark.parametrize("codec,level,key", [
    (GZIP, 0, "compression.gzip.level"), (GZIP, 10, "compression.gzip.level"), (GZIP, -2, "compression.gzip.level"),
    (LZ4, 0, "compression.lz4.level"), (LZ4, 18, "compression.lz4.level"),
    (ZSTD, 23, "compression.zstd.level"), (ZSTD, -131073, "compression.zstd.level"),
])
def test_invalid_levels_raise_config_error(codec, level, key):
    with pytest.raises(ConfigError, match=rf"{key} = {level}\b"):
        compress(codec, b"abc", level=level)


def test_levels_are_ignored_by_codecs_without_levels():
    assert decompress(SNAPPY, compress(SNAPPY, b"abc", level=99)) == b"abc"
    assert compress(NONE, b"abc", level=99) == b"abc"


# -- agreement with kafka-python (both directions) ---------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
def test_kafka_python_decodes_ours(size):
    for data in (random_bytes(size, seed=size + 1), text_bytes(size, seed=size + 1)):
        assert kafka_codec.gzip_decode(compress(GZIP, data)) == data
        if data:  # kafka-python only detects xerial framing in streams longer than the bare header
            assert kafka_codec.snappy_decode(compress(SNAPPY, data)) == data
        assert kafka_codec.lz4_decode(compress(LZ4, data, magic=2)) == data
        assert kafka_codec.lz4_decode(compress(LZ4, data, magic=1)) == data
        assert kafka_codec.lz4_decode_old_kafka(compress(LZ4, data, magic=0)) == data
        assert kafka_codec.zstd_decode(compress(ZSTD, data)) == data


@pytest.mark.parametrize("size", SIZES)
def test_we_decode_kafka_python(size):
    for data in (random_bytes(size, seed=size + 2), text_bytes(size, seed=size + 2)):
        assert decompress(GZIP, kafka_codec.gzip_encode(data)) == data
        assert decompress(SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=True)) == data
        assert decompress(SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=False)) == data
        assert decompress(LZ4, kafka_codec.lz4_encode(data), magic=2) == data
        assert decompress(LZ4, kafka_codec.lz4_encode(data), magic=1) == data
        assert decompress(LZ4, kafka_codec.lz4_encode_old_kafka(data), magic=0) == data
        assert decompress(ZSTD, kafka_codec.zstd_encode(data)) == data


@FUZZ
@given(data=payloads)
def test_kafka_python_agreement_property(data):
    assert kafka_codec.gzip_decode(compress(GZIP, data)) == data
    assert decompress(GZIP, kafka_codec.gzip_encode(data)) == data
    if data:
        assert kafka_codec.snappy_decode(compress(SNAPPY, data)) == data
    assert decompress(SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=False)) == data
    assert kafka_codec.lz4_decode(compress(LZ4, data)) == data
    assert decompress(LZ4, kafka_codec.lz4_encode(data)) == data
    assert kafka_codec.lz4_decode_old_kafka(compress(LZ4, data, magic=0)) == data
    assert decompress(LZ4, kafka_codec.lz4_encode_old_kafka(data), magic=0) == data
    assert kafka_codec.zstd_decode(compress(ZSTD, data)) == data
    assert decompress(ZSTD, kafka_codec.zstd_encode(data)) == data


def test_old_kafka_lz4_frame_is_rejected_with_magic_1():
    frame = kafka_codec.lz4_encode_old_kafka(b"data" * 100)
    with pytest.raises(CompressionError, match="Stream frame descriptor corrupted"):
        decompress(LZ4, frame, magic=1)


# -- gzip framing -----------------------------------------------------------------------------------------

def test_gzip_member_is_written_like_the_jdk():
    data = text_bytes(50_000)
    member = compress(GZIP, data)
    assert member[:10] == bytes.fromhex("1f8b08000000000000ff")  # mtime 0, XFL 0, OS 255, no name
    assert member[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
    assert gzip.decompress(member) == data
    assert compress(GZIP, b"") == bytes.fromhex("1f8b08000000000000ff") + b"\x03\x00" + bytes(8)


def test_gzip_reads_any_valid_stream_and_concatenated_members():
    a, b = text_bytes(40_000, seed=1), random_bytes(5000, seed=2)
    assert decompress(GZIP, gzip.compress(a, mtime=12345)) == a
    with_name = bytearray()
    with gzip.GzipFile(filename="records.bin", mode="wb", fileobj=_Sink(with_name), mtime=1) as f:
        f.write(a)
    assert bytes(with_name)[3] & 0x08  # FNAME set
    assert decompress(GZIP, bytes(with_name)) == a
    assert decompress(GZIP, compress(GZIP, a) + gzip.compress(b) + compress(GZIP, b"")) == a + b


class _Sink:
    def __init__(self, buf: bytearray):
        self.buf = buf

    def write(self, data):
        self.buf += data
        return len(data)

    def flush(self):
        pass


def test_gzip_ignores_trailing_bytes_that_are_not_a_member_like_the_jdk():
    data = text_bytes(1000)
    member = compress(GZIP, data)
    assert decompress(GZIP, member + b"\x00\x00\x00garbage") == data
    assert decompress(GZIP, member + b"\x1f\x8b\x09" + bytes(20)) == data  # not deflate
    assert decompress(GZIP, member + member[:9]) == data  # shorter than a header


def test_gzip_rejects_corrupt_members():
    data = text_bytes(10_000)
    member = compress(GZIP, data)
    with pytest.raises(CompressionError):
        decompress(GZIP, b"")
    with pytest.raises(CompressionError):
        decompress(GZIP, zlib.compress(data))  # zlib wrapper, not gzip
    for cut in (1, 5, 10, 11, len(member) // 2, len(member) - 8, len(member) - 1):
        with pytest.raises(CompressionError):
            decompress(GZIP, member[:cut])
    for pos in (len(member) - 8, len(member) - 5, len(member) - 4, len(member) - 1):  # CRC and ISIZE
        corrupt = bytearray(member)
        corrupt[pos] ^= 0x10
        with pytest.raises(CompressionError):
            decompress(GZIP, bytes(corrupt))
    with pytest.raises(CompressionError):  # a second member that starts like one but is broken
        decompress(GZIP, member + member[:20])


# -- snappy framing ---------------------------------------------------------------------------------------

def test_snappy_xerial_header_and_32k_blocks():
    assert codecs.XERIAL_HEADER == bytes.fromhex("82534e41505059000000000100000001")
    assert compress(SNAPPY, b"") == codecs.XERIAL_HEADER
    data = text_bytes(100_000)
    blocks = _xerial_blocks(compress(SNAPPY, data))
    assert len(blocks) == 4
    chunks = [bytes(cramjam.snappy.decompress_raw(block)) for block in blocks]
    assert [len(c) for c in chunks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(chunks) == data


def test_snappy_reads_concatenated_streams_raw_blocks_and_bare_header():
    a, b = text_bytes(70_000, seed=3), random_bytes(40_000, seed=4)
    assert decompress(SNAPPY, compress(SNAPPY, a) + compress(SNAPPY, b)) == a + b
    assert decompress(SNAPPY, compress(SNAPPY, a) + codecs.XERIAL_HEADER) == a
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(a))) == a
    assert decompress(SNAPPY, codecs.XERIAL_HEADER) == b""
    assert decompress(SNAPPY, b"\x00") == b""  # raw block of nothing


def test_snappy_rejects_corrupt_framing():
    stream = compress(SNAPPY, text_bytes(70_000))
    cases = {
        "empty": b"",
        "short input starting with magic is a raw block": codecs.XERIAL_MAGIC + b"\x00\x00\x00\x01",
        "version 0": codecs.XERIAL_MAGIC + struct.pack(">ii", 0, 1) + stream[16:],
        "dangling length bytes": stream + b"\x00\x00",
        "negative length": stream[:16] + struct.pack(">i", -5) + stream[20:],
        "zero-length block": stream[:16] + struct.pack(">i", 0),
        "truncated concatenated header": stream + codecs.XERIAL_HEADER[:12],
        "cut inside a block": stream[:len(stream) - 10],
        "forged uncompressed length": b"\xff\xff\xff\xff\x0f" + bytes(10),
        "garbage": b"\x05not snappy at all",
    }
    for name, data in cases.items():
        with pytest.raises(CompressionError):
            decompress(SNAPPY, data)
            pytest.fail(name)
    with pytest.raises(CompressionError, match="does not fit") as info:
        decompress(SNAPPY, stream[:16] + struct.pack(">i", len(stream)) + stream[20:])
    assert info.value.position == 16


# -- lz4 framing (Kafka's Lz4CompressionTest) -------------------------------------------------------------

def test_lz4_header_checksum_bytes():
    assert compress(LZ4, b"x", magic=2)[:7] == bytes.fromhex("04224d18604082")
    assert compress(LZ4, b"x", magic=1)[:7] == bytes.fromhex("04224d18604082")
    assert compress(LZ4, b"x", magic=0)[:7] == bytes.fromhex("04224d1860401a")
    # The same values from the definition: xxh32 of FLG..BD, or of magic..BD for Kafka's old bug.
    assert (xxhash.xxh32_intdigest(b"\x60\x40") >> 8) & 0xFF == 0x82
    assert (xxhash.xxh32_intdigest(bytes.fromhex("04224d186040")) >> 8) & 0xFF == 0x1A


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("level", [1, 9, 17])
def test_lz4_compression_decompression(magic, level):
    """Kafka's testCompressionDecompression."""
    data = b"data" * 256
    frame = compress(LZ4, data, magic=magic, level=level)
    assert frame[-4:] == b"\x00\x00\x00\x00"  # end mark
    assert decompress(LZ4, frame, magic=magic) == data


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_lz4_bad_frame_checksum(magic):
    """Kafka's testBadFrameChecksum and testLz4FramingMagicV0/V1: HC is only checked for magic >= 1."""
    data = text_bytes(5000)
    frame = bytearray(compress(LZ4, data, magic=1))
    frame[6] = 0xFF
    if magic == 0:
        assert decompress(LZ4, bytes(frame), magic=0) == data
    else:
        with pytest.raises(CompressionError, match="Stream frame descriptor corrupted") as info:
            decompress(LZ4, bytes(frame), magic=magic)
        assert info.value.position == 6


def test_lz4_magic_v0_frames_need_magic_v0_to_read():
    frame = compress(LZ4, b"old format", magic=0)
    assert decompress(LZ4, frame, magic=0) == b"old format"
    with pytest.raises(CompressionError, match="Stream frame descriptor corrupted"):
        decompress(LZ4, frame, magic=2)


@pytest.mark.parametrize("payload", [b"", b"\x01", random_bytes(1000), b"\x01" * 1000,
                                     random_bytes(1 << 16), random_bytes(96 * 1024), b"\x01" * (96 * 1024)])
@pytest.mark.parametrize("magic", [0, 2])
def test_lz4_bad_block_size(payload, magic):
    """Kafka's testBadBlockSize: the first block's size field set to 16 MiB (stored bit kept)."""
    frame = bytearray(compress(LZ4, payload, magic=magic))
    (word,) = struct.unpack_from("<I", frame, 7)
    struct.pack_into("<I", frame, 7, (word & 0x80000000) | (1 << 24))
    with pytest.raises(CompressionError, match="exceeded max") as info:
        decompress(LZ4, bytes(frame), magic=magic)
    assert "Block size 16777216 exceeded max: 65536" in str(info.value)
    assert info.value.position == 7


def test_lz4_not_supported_and_premature_end():
    """Kafka's testNotSupported and testHeaderPrematureEnd."""
    frame = bytearray(compress(LZ4, b"abc" * 100))
    frame[0] = 0x00
    with pytest.raises(CompressionError, match="invalid magic bytes"):
        decompress(LZ4, bytes(frame))
    for short in (b"", b"\x04\x22", codecs.LZ4_MAGIC + b"\x60", codecs.LZ4_MAGIC + b"\x60\x40"):
        with pytest.raises(CompressionError, match="Stream ended prematurely"):
            decompress(LZ4, short)


def test_lz4_stores_incompressible_blocks_and_splits_at_64k():
    random_frame = compress(LZ4, random_bytes(1000))
    assert _lz4_blocks(random_frame) == [(1000 | 0x80000000, random_bytes(1000))]
    text = text_bytes(1000)
    [(word, block)] = _lz4_blocks(compress(LZ4, text))
    assert not word & 0x80000000 and word < 1000
    data = random_bytes(200_000) + text_bytes(100_000)
    blocks = _lz4_blocks(compress(LZ4, data))
    assert len(blocks) == 5
    assert [w for w, _ in blocks[:3]] == [65536 | 0x80000000] * 3  # random: stored
    assert not blocks[-1][0] & 0x80000000  # text: compressed


def _with_descriptor(frame: bytes, flg: int | None = None, bd: int | None = None) -> bytes:
    """Change FLG/BD of a 7-byte-header frame and recompute a correct HC."""
    out = bytearray(frame)
    if flg is not None:
        out[4] = flg
    if bd is not None:
        out[5] = bd
    out[6] = (xxhash.xxh32_intdigest(bytes(out[4:6])) >> 8) & 0xFF
    return bytes(out)


@pytest.mark.parametrize("flg,bd,message", [
    (0x61, 0x40, "Reserved bits must be 0"),
    (0x40, 0x40, "Dependent block stream is unsupported"),
    (0xA0, 0x40, "Version 2 is unsupported"),
    (0x20, 0x40, "Version 0 is unsupported"),
    (0x60, 0x41, "Reserved2 field must be 0"),
    (0x60, 0x30, "Block size value must be between 4 and 7"),
    (0x60, 0xC0, "Reserved3 field must be 0"),
])
def test_lz4_descriptor_validation(flg, bd, message):
    frame = _with_descriptor(compress(LZ4, b"abc" * 100), flg, bd)
    for magic in (0, 2):
        with pytest.raises(CompressionError, match=message):
            decompress(LZ4, frame, magic=magic)


@pytest.mark.parametrize("block_size", [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB,
                                        lz4.frame.BLOCKSIZE_MAX1MB, lz4.frame.BLOCKSIZE_MAX4MB])
@pytest.mark.parametrize("checksums", [False, True])
def test_lz4_reads_standard_frames_with_optional_fields(block_size, checksums):
    data = text_bytes(300_000) + random_bytes(100_000)
    frame = lz4.frame.compress(data, block_size=block_size, block_linked=False, store_size=True,
                               content_checksum=checksums, block_checksum=checksums)
    assert decompress(LZ4, frame) == data
    assert decompress(LZ4, frame, magic=0) == data


def test_lz4_verifies_block_checksums_and_needs_content_checksum_bytes():
    data = text_bytes(10_000)
    frame = lz4.frame.compress(data, block_linked=False, store_size=False, block_checksum=True,
                               content_checksum=True)
    (size,) = struct.unpack_from("<I", frame, 7)
    corrupt = bytearray(frame)
    corrupt[7 + 4 + (size & 0x7FFFFFFF)] ^= 0x01  # first byte of the block checksum
    with pytest.raises(CompressionError, match="Block checksum mismatch"):
        decompress(LZ4, bytes(corrupt))
    with pytest.raises(CompressionError, match="Stream ended prematurely"):
        decompress(LZ4, frame[:-2])  # content checksum cut short
    # The content checksum itself is skipped, not verified, as Kafka does.
    unverified = frame[:-4] + b"\x00\x00\x00\x00"
    assert decompress(LZ4, unverified) == data


def test_lz4_rejects_linked_blocks_and_corrupt_blocks():
    linked = lz4.frame.compress(text_bytes(200_000), block_linked=True)
    with pytest.raises(CompressionError, match="Dependent block stream is unsupported"):
        decompress(LZ4, linked)
    frame = compress(LZ4, text_bytes(1000))
    for cut in range(len(frame)):
        with pytest.raises(CompressionError):
            decompress(LZ4, frame[:cut])
    garbage_block = frame[:7] + struct.pack("<I", 20) + b"\xff" * 20 + b"\x00\x00\x00\x00"
    with pytest.raises(CompressionError) as info:
        decompress(LZ4, garbage_block)
    assert info.value.position == 7


def test_lz4_ignores_bytes_after_the_end_mark_like_kafka():
    assert decompress(LZ4, compress(LZ4, b"abc") + b"trailing") == b"abc"


# -- zstd -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_rejected_for_legacy_magic(magic):
    frame = compress(ZSTD, b"abc")
    with pytest.raises(CompressionError, match=f"zstd is not allowed with magic {magic}"):
        compress(ZSTD, b"abc", magic=magic)
    with pytest.raises(CompressionError, match=f"zstd is not allowed with magic {magic}"):
        decompress(ZSTD, frame, magic=magic)


def test_zstd_reads_frames_without_content_size_and_concatenated_frames():
    data = text_bytes(500_000) + random_bytes(50_000)
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(no_size) == -1
    assert decompress(ZSTD, no_size) == data
    streamed = zstandard.ZstdCompressor(level=1).compressobj()
    streamed_frame = streamed.compress(data[:100_000]) + streamed.compress(data[100_000:]) + streamed.flush()
    assert decompress(ZSTD, streamed_frame) == data
    with_checksum = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    skippable = struct.pack("<II", 0x184D2A53, 5) + b"hello"
    assert decompress(ZSTD, no_size + skippable + with_checksum + compress(ZSTD, b"")) == data + data
    assert decompress(ZSTD, b"") == b""  # zstd-jni reads an empty stream as empty


def test_zstd_rejects_truncated_and_corrupt_frames():
    data = text_bytes(3000)
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    for cut in range(1, len(frame)):
        with pytest.raises(CompressionError, match="truncated"):
            decompress(ZSTD, frame[:cut])
    corrupt = bytearray(frame)
    corrupt[-1] ^= 0x01  # content checksum
    with pytest.raises(CompressionError):
        decompress(ZSTD, bytes(corrupt))
    with pytest.raises(CompressionError, match="unknown frame magic"):
        decompress(ZSTD, b"\x00" * 16)
    with pytest.raises(CompressionError):
        decompress(ZSTD, frame + b"x")
    with pytest.raises(CompressionError):
        decompress(ZSTD, struct.pack("<II", 0x184D2A50, 100) + b"short")


# -- max_output_bytes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_max_output_bytes_is_exact(codec):
    data = text_bytes(300_000)
    compressed = compress(codec, data)
    assert decompress(codec, compressed, max_output_bytes=len(data)) == data
    with pytest.raises(CompressionError, match="max_output_bytes"):
        decompress(codec, compressed, max_output_bytes=len(data) - 1)
    with pytest.raises(CompressionError, match="max_output_bytes"):
        decompress(codec, compressed, max_output_bytes=0)
    assert decompress(codec, compress(codec, b""), max_output_bytes=0) == b""


@pytest.mark.parametrize("bomb", [
    pytest.param(lambda zeros: (GZIP, compress(GZIP, zeros)), id="gzip"),
    pytest.param(lambda zeros: (SNAPPY, compress(SNAPPY, zeros)), id="snappy"),
    pytest.param(lambda zeros: (LZ4, lz4.frame.compress(zeros, block_size=lz4.frame.BLOCKSIZE_MAX4MB,
                                                         block_linked=False)), id="lz4-4mb-blocks"),
    pytest.param(lambda zeros: (ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(zeros)),
                 id="zstd"),
])
def test_max_output_bytes_stops_decompression_bombs(bomb):
    codec, compressed = bomb(bytes(64 << 20))
    assert len(compressed) < (4 << 20)
    with pytest.raises(CompressionError, match="max_output_bytes"):
        decompress(codec, compressed, max_output_bytes=1 << 20)


@pytest.mark.parametrize("codec,make", [
    (GZIP, lambda zeros: compress(GZIP, zeros)),
    (LZ4, lambda zeros: compress(LZ4, zeros)),
    (LZ4, lambda zeros: lz4.frame.compress(zeros, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False)),
    (ZSTD, lambda zeros: zstandard.ZstdCompressor(write_content_size=False).compress(zeros)),
    (ZSTD, lambda zeros: compress(ZSTD, zeros[:1 << 20]) + compress(ZSTD, zeros)),
], ids=["gzip", "lz4", "lz4-4mb-blocks", "zstd", "zstd-two-frames"])
@pytest.mark.parametrize("filler", ["zeros", "pattern"])  # zstd: RLE blocks vs compressed blocks
def test_max_output_bytes_bounds_memory_held(codec, make, filler):
    """A bomb is stopped after at most one block beyond the bound, not after decoding it whole."""
    compressed = make(bytes(64 << 20) if filler == "zeros" else random_bytes(1024) * (64 << 10))
    tracemalloc.start()
    try:
        with pytest.raises(CompressionError, match="max_output_bytes"):
            decompress(codec, compressed, max_output_bytes=(1 << 20) + 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20


def test_snappy_forged_length_is_rejected_without_allocating_it():
    forged = b"\xfe\xff\xff\xff\x0f" + b"\x00" * 20  # declares 4 GiB
    with pytest.raises(CompressionError, match="declares"):
        decompress(SNAPPY, forged)
    with pytest.raises(CompressionError, match="declares"):
        decompress(SNAPPY, codecs.XERIAL_HEADER + struct.pack(">i", len(forged)) + forged)


# -- corrupt input raises CompressionError and nothing else -------------------------------------------------

PREFIXES = [b"", codecs.LZ4_MAGIC, codecs.LZ4_FRAME_HEADER, codecs.LZ4_FRAME_HEADER_V0, codecs.XERIAL_HEADER,
            codecs.XERIAL_MAGIC, bytes.fromhex("1f8b08000000000000ff"), bytes.fromhex("28b52ffd"),
            bytes.fromhex("28b52ffd2000")]


@FUZZ
@given(codec_magic=st.sampled_from(CODEC_MAGICS), prefix=st.sampled_from(PREFIXES),
       body=st.binary(max_size=400), bound=st.sampled_from([None, 0, 100, 1 << 20]))
def test_garbage_raises_only_compression_error(codec_magic, prefix, body, bound):
    codec, magic = codec_magic
    _assert_only_compression_error(codec, prefix + body, magic, bound)


@FUZZ
@given(codec_magic=st.sampled_from(CODEC_MAGICS), data=payloads, edits=st.data())
def test_mutated_streams_raise_only_compression_error(codec_magic, data, edits):
    codec, magic = codec_magic
    stream = bytearray(compress(codec, data, magic=magic))
    for _ in range(edits.draw(st.integers(1, 4))):
        if not stream:
            break
        pos = edits.draw(st.integers(0, len(stream) - 1))
        action = edits.draw(st.sampled_from(["flip", "set", "cut", "drop"]))
        if action == "flip":
            stream[pos] ^= 1 << edits.draw(st.integers(0, 7))
        elif action == "set":
            stream[pos] = edits.draw(st.integers(0, 255))
        elif action == "cut":
            del stream[pos:]
        else:
            del stream[pos]
    _assert_only_compression_error(codec, bytes(stream), magic, edits.draw(st.sampled_from([None, 1000])))


@FUZZ
@given(codec_magic=st.sampled_from([(GZIP, 2), (LZ4, 0), (LZ4, 2), (ZSTD, 2)]), data=payloads, cut=st.data())
def test_truncated_streams_are_rejected(codec_magic, data, cut):
    codec, magic = codec_magic
    stream = compress(codec, data, magic=magic)
    length = cut.draw(st.integers(1 if codec == ZSTD else 0, len(stream) - 1))
    with pytest.raises(CompressionError):
        decompress(codec, stream[:length], magic=magic)


@FUZZ
@given(data=payloads, cut=st.data())
def test_truncated_snappy_is_rejected_unless_cut_at_a_block_boundary(data, cut):
    stream = compress(SNAPPY, data)
    boundaries = {16}
    pos = 16
    while pos < len(stream):
        pos += 4 + struct.unpack_from(">i", stream, pos)[0]
        boundaries.add(pos)
    length = cut.draw(st.integers(0, len(stream) - 1))
    if length in boundaries:
        assert data.startswith(decompress(SNAPPY, stream[:length]))
    else:
        with pytest.raises(CompressionError):
            decompress(SNAPPY, stream[:length])


def test_errors_carry_the_position_in_the_payload():
    stream = compress(SNAPPY, text_bytes(40_000))
    second_block = 16 + 4 + struct.unpack_from(">i", stream, 16)[0]
    corrupt = stream[:second_block] + struct.pack(">i", -1) + stream[second_block + 4:]
    with pytest.raises(CompressionError) as info:
        decompress(SNAPPY, corrupt)
    assert info.value.position == second_block
    assert info.value.path is None
