/* Internal header of storage_engine.record._speedups: what its source files share, and the one definition of the
 * bytes they all read.
 *
 * _speedups.c   record decode/encode (records.py's per-record loops) and the module itself
 * _keymap.c     the compaction key map kernels: the open-addressing table, sorted-map probes, key hashing,
 *               filling the map from a batch (maintenance/offset_map.py, maintenance/record_filter.py)
 * _clean.c      the cleaner's record filter: which records of a batch survive, and their re-encoding
 * _walk.c       CRC-32C (hardware when the CPU has it), a batch handed to a kernel (SpBatch), the recovery batch
 *               walk (segment/file_records.py) and the key columns of the Spark data source
 *               (spark_jobs/segment_source.py)
 *
 * Defined here, once, for every file above: the magic-2 batch header (its field offsets, SpBatchHeader and its
 * reader and writer, the framing check of a batch), fixed-width big-endian reads and writes, zig-zag varints
 * (reading, writing, sizes), the record parser, and the conversion of Python int arguments. Which compiled or
 * pure-Python kernels the engine runs is chosen in Python, by storage_engine/record/kernels.py.
 *
 * The parsers here never raise: they answer "accepted" or "rejected", and a rejected batch is handed back to
 * the Python code, which raises the exact error (class, message, position) it always raised. Their accept set
 * is the pure-Python decoder's (records._py_decode_records): every field must lie inside its record, which the
 * Python decoder checks in its own way (a field that runs past its record leaves the position past the record's
 * end, and it rejects that).
 */
#ifndef STORAGE_ENGINE_SPEEDUPS_H
#define STORAGE_ENGINE_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- fixed-width big-endian integers ------------------------------------------------------------------------- */

static inline uint64_t
sp_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t
sp_get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint16_t
sp_get_u16(const uint8_t *p)
{
    return (uint16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline int64_t sp_get_i64(const uint8_t *p) { return (int64_t)sp_get_u64(p); }
static inline int32_t sp_get_i32(const uint8_t *p) { return (int32_t)sp_get_u32(p); }
static inline int16_t sp_get_i16(const uint8_t *p) { return (int16_t)sp_get_u16(p); }

static inline void
sp_put_u64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline void
sp_put_u32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

static inline void
sp_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void sp_put_i64(uint8_t *p, int64_t v) { sp_put_u64(p, (uint64_t)v); }
static inline void sp_put_i32(uint8_t *p, int32_t v) { sp_put_u32(p, (uint32_t)v); }
static inline void sp_put_i16(uint8_t *p, int16_t v) { sp_put_u16(p, (uint16_t)v); }

/* -- the magic-2 record batch header (record_batch.py's module docstring and BATCH_HEADER) -------------------- */

enum {
    SP_HDR_BASE_OFFSET = 0,               /* int64 */
    SP_HDR_LENGTH = 8,                    /* int32: batch size - SP_LOG_OVERHEAD */
    SP_HDR_PARTITION_LEADER_EPOCH = 12,   /* int32, not covered by the CRC */
    SP_HDR_MAGIC = 16,                    /* int8 */
    SP_HDR_CRC = 17,                      /* uint32: CRC-32C of [SP_HDR_ATTRIBUTES, end of batch) */
    SP_HDR_ATTRIBUTES = 21,               /* int16, low byte only: the SP_ATTR_* bits */
    SP_HDR_LAST_OFFSET_DELTA = 23,        /* int32 */
    SP_HDR_BASE_TIMESTAMP = 27,           /* int64: first timestamp, or the delete horizon (SP_ATTR_DELETE_HORIZON) */
    SP_HDR_MAX_TIMESTAMP = 35,            /* int64 */
    SP_HDR_PRODUCER_ID = 43,              /* int64 */
    SP_HDR_PRODUCER_EPOCH = 51,           /* int16 */
    SP_HDR_BASE_SEQUENCE = 53,            /* int32 */
    SP_HDR_RECORDS_COUNT = 57,            /* int32 */
    SP_HDR_RECORDS = 61,                  /* the records section: plain, or one compressed stream */
};

#define SP_LOG_OVERHEAD 12                /* offset int64 + size int32 in front of every entry, all magics */
#define SP_HEADER_SIZE_UP_TO_MAGIC 17     /* enough bytes to know the magic of an entry */
#define SP_MIN_ENTRY_SIZE_FIELD 14        /* smallest legal size field (v0 record overhead) */
#define SP_BATCH_OVERHEAD SP_HDR_RECORDS  /* the whole header */
#define SP_MAGIC_V2 2

#define SP_ATTR_CODEC_MASK 0x07
#define SP_ATTR_LOG_APPEND_TIME 0x08
#define SP_ATTR_TRANSACTIONAL 0x10
#define SP_ATTR_CONTROL 0x20
#define SP_ATTR_DELETE_HORIZON 0x40

/* The header's fields, as record_batch.RecordBatch holds them. */
typedef struct {
    int64_t base_offset;
    int32_t length;
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;
} SpBatchHeader;

/* The header at p (SP_BATCH_OVERHEAD bytes must be there). */
static inline void
sp_read_batch_header(const uint8_t *p, SpBatchHeader *h)
{
    h->base_offset = sp_get_i64(p + SP_HDR_BASE_OFFSET);
    h->length = sp_get_i32(p + SP_HDR_LENGTH);
    h->partition_leader_epoch = sp_get_i32(p + SP_HDR_PARTITION_LEADER_EPOCH);
    h->magic = (int8_t)p[SP_HDR_MAGIC];
    h->crc = sp_get_u32(p + SP_HDR_CRC);
    h->attributes = sp_get_i16(p + SP_HDR_ATTRIBUTES);
    h->last_offset_delta = sp_get_i32(p + SP_HDR_LAST_OFFSET_DELTA);
    h->base_timestamp = sp_get_i64(p + SP_HDR_BASE_TIMESTAMP);
    h->max_timestamp = sp_get_i64(p + SP_HDR_MAX_TIMESTAMP);
    h->producer_id = sp_get_i64(p + SP_HDR_PRODUCER_ID);
    h->producer_epoch = sp_get_i16(p + SP_HDR_PRODUCER_EPOCH);
    h->base_sequence = sp_get_i32(p + SP_HDR_BASE_SEQUENCE);
    h->records_count = sp_get_i32(p + SP_HDR_RECORDS_COUNT);
}

/* Write every field of h at p (SP_BATCH_OVERHEAD bytes), the CRC field as h->crc. */
static inline void
sp_write_batch_header(uint8_t *p, const SpBatchHeader *h)
{
    sp_put_i64(p + SP_HDR_BASE_OFFSET, h->base_offset);
    sp_put_i32(p + SP_HDR_LENGTH, h->length);
    sp_put_i32(p + SP_HDR_PARTITION_LEADER_EPOCH, h->partition_leader_epoch);
    p[SP_HDR_MAGIC] = (uint8_t)h->magic;
    sp_put_u32(p + SP_HDR_CRC, h->crc);
    sp_put_i16(p + SP_HDR_ATTRIBUTES, h->attributes);
    sp_put_i32(p + SP_HDR_LAST_OFFSET_DELTA, h->last_offset_delta);
    sp_put_i64(p + SP_HDR_BASE_TIMESTAMP, h->base_timestamp);
    sp_put_i64(p + SP_HDR_MAX_TIMESTAMP, h->max_timestamp);
    sp_put_i64(p + SP_HDR_PRODUCER_ID, h->producer_id);
    sp_put_i16(p + SP_HDR_PRODUCER_EPOCH, h->producer_epoch);
    sp_put_i32(p + SP_HDR_BASE_SEQUENCE, h->base_sequence);
    sp_put_i32(p + SP_HDR_RECORDS_COUNT, h->records_count);
}

/* The framing of the entry at p, `remaining` bytes available there: its size (SP_LOG_OVERHEAD + its length field)
 * when it is a magic-2 batch that lies whole inside the remaining bytes and is at least a batch header; 0 when it
 * is anything else (shorter than SP_HEADER_SIZE_UP_TO_MAGIC, a length field below SP_MIN_ENTRY_SIZE_FIELD, torn,
 * another magic, too short for a magic-2 header). Its CRC is not checked. */
static inline int64_t
sp_v2_batch_size(const uint8_t *p, int64_t remaining)
{
    if (remaining < SP_HEADER_SIZE_UP_TO_MAGIC) {
        return 0;
    }
    const int32_t length = sp_get_i32(p + SP_HDR_LENGTH);
    const int64_t size = SP_LOG_OVERHEAD + (int64_t)length;
    if (length < SP_MIN_ENTRY_SIZE_FIELD || size > remaining || p[SP_HDR_MAGIC] != SP_MAGIC_V2 ||
        size < SP_BATCH_OVERHEAD) {
        return 0;
    }
    return size;
}

/* -- zig-zag varints (records.py's module docstring) --------------------------------------------------------- */

static inline int32_t
sp_unzigzag32(uint32_t v)
{
    return (int32_t)(v >> 1) ^ -(int32_t)(v & 1);
}

static inline int64_t
sp_unzigzag64(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline uint64_t
sp_zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

/* Reading never raises: SP_VARINT_OK and *pos moved past the varint, or why it was rejected (*pos unchanged). */
enum { SP_VARINT_OK = 0, SP_VARINT_TRUNCATED = -1, SP_VARINT_TOO_LONG = -2 };

/* records.read_varint(b, *pos, max_bytes) bounded by `end`, before the zig-zag step: LEB128 of at most max_bytes
 * bytes, bits shifted past 64 dropped. */
static inline int
sp_read_uvarint(const uint8_t *b, int64_t end, int64_t *pos, int max_bytes, uint64_t *out)
{
    const int64_t p = *pos;
    uint64_t acc = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p + i >= end) {
            return SP_VARINT_TRUNCATED;
        }
        const uint8_t c = b[p + i];
        acc |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = acc;
            *pos = p + i + 1;
            return SP_VARINT_OK;
        }
    }
    return SP_VARINT_TOO_LONG;
}

/* A varint: at most 5 bytes, bits past 32 dropped, as Java's int accumulator drops them. */
static inline int
sp_read_varint(const uint8_t *b, int64_t end, int64_t *pos, int32_t *out)
{
    uint64_t acc;
    const int rc = sp_read_uvarint(b, end, pos, 5, &acc);
    if (rc == SP_VARINT_OK) {
        *out = sp_unzigzag32((uint32_t)acc);
    }
    return rc;
}

/* A varlong: at most 10 bytes, bits past 64 dropped. */
static inline int
sp_read_varlong(const uint8_t *b, int64_t end, int64_t *pos, int64_t *out)
{
    uint64_t acc;
    const int rc = sp_read_uvarint(b, end, pos, 10, &acc);
    if (rc == SP_VARINT_OK) {
        *out = sp_unzigzag64(acc);
    }
    return rc;
}

/* Bytes of the LEB128 encoding of an already zig-zagged value. */
static inline int
sp_varint_size(uint64_t zz)
{
    int n = 1;
    while (zz >= 0x80) {
        zz >>= 7;
        n++;
    }
    return n;
}

/* Write the LEB128 encoding of an already zig-zagged value at p; returns the position after it. */
static inline uint8_t *
sp_put_varint(uint8_t *p, uint64_t zz)
{
    while (zz >= 0x80) {
        *p++ = (uint8_t)((zz & 0x7F) | 0x80);
        zz >>= 7;
    }
    *p++ = (uint8_t)zz;
    return p;
}

/* A nullable bytes field of a record (key, value, header key or value): its length as a varint, -1 for null (and
 * nothing follows), then its bytes. Its encoded size, and writing it at w (returns the position after it). */
static inline int64_t
sp_bytes_field_size(int64_t len)
{
    return len < 0 ? 1 : sp_varint_size(sp_zigzag(len)) + len;
}

static inline uint8_t *
sp_put_bytes_field(uint8_t *w, const void *data, int64_t len)
{
    if (len < 0) {
        *w++ = 1;  /* varint -1 */
        return w;
    }
    w = sp_put_varint(w, sp_zigzag(len));
    if (len > 0) {
        memcpy(w, data, (size_t)len);
    }
    return w + len;
}

/* -- records ------------------------------------------------------------------------------------------------- */

/* One record as parsed (pointers into the payload). */
typedef struct {
    int64_t ts_delta;
    int32_t offset_delta;
    int32_t key_len;          /* -1: null key */
    int32_t value_len;        /* -1: null value (a tombstone) */
    const uint8_t *key;
    const uint8_t *value;
    int64_t headers_pos;      /* position of the header count */
    int64_t body_end;         /* position after the record */
} SpRecord;

/* Parse the record at *pos of b[0:end) (see the header comment for the accept set); *pos moves past it. */
static inline int
sp_parse_record(const uint8_t *b, int64_t end, int64_t *pos, SpRecord *r)
{
    int32_t length;
    if (sp_read_varint(b, end, pos, &length) < 0) {
        return -1;
    }
    const int64_t body_end = *pos + length;
    if (length < 0 || body_end > end) {
        return -1;
    }
    int64_t p = *pos + 1;  /* attributes, unused */
    if (sp_read_varlong(b, body_end, &p, &r->ts_delta) < 0 || sp_read_varint(b, body_end, &p, &r->offset_delta) < 0 ||
        sp_read_varint(b, body_end, &p, &r->key_len) < 0) {
        return -1;
    }
    if (r->key_len >= 0) {
        if (p + r->key_len > body_end) {
            return -1;
        }
        r->key = b + p;
        p += r->key_len;
    }
    else if (r->key_len == -1) {
        r->key = NULL;
    }
    else {
        return -1;
    }
    if (sp_read_varint(b, body_end, &p, &r->value_len) < 0) {
        return -1;
    }
    if (r->value_len >= 0) {
        if (p + r->value_len > body_end) {
            return -1;
        }
        r->value = b + p;
        p += r->value_len;
    }
    else if (r->value_len == -1) {
        r->value = NULL;
    }
    else {
        return -1;
    }
    if (p >= body_end) {
        return -1;
    }
    r->headers_pos = p;
    if (b[p] == 0) {
        p += 1;
    }
    else {
        int32_t count;
        if (sp_read_varint(b, body_end, &p, &count) < 0 || count < 0 || count > body_end - p) {
            return -1;
        }
        for (int32_t i = 0; i < count; i++) {
            int32_t key_len, value_len;
            if (sp_read_varint(b, body_end, &p, &key_len) < 0 || key_len < 0 || p + key_len > body_end) {
                return -1;
            }
            p += key_len;
            if (sp_read_varint(b, body_end, &p, &value_len) < 0) {
                return -1;
            }
            if (value_len >= 0) {
                if (p + value_len > body_end) {
                    return -1;
                }
                p += value_len;
            }
            else if (value_len != -1) {
                return -1;
            }
        }
    }
    if (p != body_end) {
        return -1;
    }
    r->body_end = body_end;
    *pos = body_end;
    return 0;
}

/* -- Python arguments ---------------------------------------------------------------------------------------- */

/* A Python int argument as int64 (OverflowError or TypeError as PyLong_AsLongLong raises them). 0 or -1. */
static inline int
sp_as_i64(PyObject *obj, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A tuple argument of n ints (`what` names it in the TypeError) into out[0:n). 0 or -1. */
static inline int
sp_i64_tuple(PyObject *t, Py_ssize_t n, const char *what, int64_t *out)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != n) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of %zd ints", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sp_as_i64(PyTuple_GET_ITEM(t, i), &out[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* -- shared kernels (defined in _keymap.c and _walk.c) ------------------------------------------------------- */

/* xxh3-128 of a key as two signed int64 (high, low): offset_map.key_hash. */
void sp_key_hash(const uint8_t *key, size_t len, int64_t *hi, int64_t *lo);

/* CRC-32C (Castagnoli) of buf[0:len). */
uint32_t sp_crc32c(const uint8_t *buf, size_t len);

/* A magic-2 batch handed to a kernel as the tuple (buf, pos, records): its header at buf[pos:pos + 61], and its
 * records section in place after the header (records None: buf[pos + 61:pos + 12 + length]) or given
 * decompressed (records: a bytes-like object). sp_batch_acquire reads the header (ValueError if it lies outside
 * buf); sp_batch_records then exposes the records section (ValueError if it lies outside buf). Release always. */
typedef struct {
    SpBatchHeader h;
    const uint8_t *records;   /* set by sp_batch_records */
    int64_t records_len;
    PyObject *records_obj;    /* borrowed: None or the decompressed section */
    Py_buffer views[2];
    int held;                 /* buffers acquired */
} SpBatch;

int sp_batch_acquire(SpBatch *b, PyObject *spec);
int sp_batch_records(SpBatch *b);
void sp_batch_release(SpBatch *b);

/* A key map to probe: the in-process open-addressing table, or a sorted map (three arrays + bucket starts). */
typedef struct {
    int kind;                 /* 0 table, 1 sorted, 2 sorted with 32-bit offsets relative to `base` */
    Py_buffer views[4];
    int held;                 /* buffers acquired */
    int64_t *table;
    uint64_t slots;
    const int64_t *hi, *lo, *off, *starts;
    const uint32_t *off32;    /* kind 2: offset = base + off32[i] */
    int64_t base;
    uint64_t n;
    int bits;
} SpMap;

int sp_map_acquire(SpMap *m, PyObject *spec);
void sp_map_release(SpMap *m);
int64_t sp_map_get(const SpMap *m, int64_t hi, int64_t lo);

extern PyMethodDef sp_keymap_methods[];
extern PyMethodDef sp_clean_methods[];
extern PyMethodDef sp_walk_methods[];

#endif
