/* Internal header of storage_engine.record._speedups: what its source files share.
 *
 * _speedups.c   record decode/encode (records.py's per-record loops) and the module itself
 * _keymap.c     the compaction key map kernels: the open-addressing table, sorted-map probes, key hashing,
 *               filling the map from a batch (maintenance/offset_map.py, maintenance/cleaner.py)
 * _clean.c      the cleaner's record filter: which records of a batch survive, and their re-encoding
 * _walk.c       CRC-32C (hardware when the CPU has it), the recovery batch walk (segment/file_records.py) and
 *               the key columns of the Spark data source (spark_jobs/segment_source.py)
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

/* -- record batch header (record_batch.py's module docstring) ------------------------------------------------ */
#define SP_LOG_OVERHEAD 12
#define SP_BATCH_OVERHEAD 61
#define SP_CRC_OFFSET 17
#define SP_ATTRIBUTES_OFFSET 21
#define SP_CODEC_MASK 0x07
#define SP_LOG_APPEND_TIME 0x08
#define SP_TRANSACTIONAL 0x10
#define SP_CONTROL 0x20
#define SP_DELETE_HORIZON 0x40

static inline int64_t
sp_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return (int64_t)v;
}

static inline int32_t
sp_be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t
sp_be16(const uint8_t *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline void
sp_put_be64(uint8_t *p, int64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v = (int64_t)((uint64_t)v >> 8);
    }
}

static inline void
sp_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* -- varints that never raise: 0 accepted, -1 rejected ------------------------------------------------------- */

/* records.read_varint(buf, pos, 5) bounded by `end`: bits past 32 dropped, as Java's int accumulator does. */
static inline int
sp_varint(const uint8_t *b, int64_t end, int64_t *pos, int32_t *out)
{
    int64_t p = *pos;
    uint32_t acc = 0;
    for (int i = 0; i < 5; i++) {
        if (p + i >= end) {
            return -1;
        }
        const uint8_t c = b[p + i];
        acc |= (uint32_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = (int32_t)(acc >> 1) ^ -(int32_t)(acc & 1);
            *pos = p + i + 1;
            return 0;
        }
    }
    return -1;
}

static inline int
sp_varlong(const uint8_t *b, int64_t end, int64_t *pos, int64_t *out)
{
    int64_t p = *pos;
    uint64_t acc = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end) {
            return -1;
        }
        const uint8_t c = b[p + i];
        acc |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = (int64_t)(acc >> 1) ^ -(int64_t)(acc & 1);
            *pos = p + i + 1;
            return 0;
        }
    }
    return -1;
}

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
    if (sp_varint(b, end, pos, &length) < 0) {
        return -1;
    }
    const int64_t body_end = *pos + length;
    if (length < 0 || body_end > end) {
        return -1;
    }
    int64_t p = *pos + 1;  /* attributes, unused */
    if (sp_varlong(b, body_end, &p, &r->ts_delta) < 0 || sp_varint(b, body_end, &p, &r->offset_delta) < 0 ||
        sp_varint(b, body_end, &p, &r->key_len) < 0) {
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
    if (sp_varint(b, body_end, &p, &r->value_len) < 0) {
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
        if (sp_varint(b, body_end, &p, &count) < 0 || count < 0 || count > body_end - p) {
            return -1;
        }
        for (int32_t i = 0; i < count; i++) {
            int32_t key_len, value_len;
            if (sp_varint(b, body_end, &p, &key_len) < 0 || key_len < 0 || p + key_len > body_end) {
                return -1;
            }
            p += key_len;
            if (sp_varint(b, body_end, &p, &value_len) < 0) {
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

/* -- writing varints ----------------------------------------------------------------------------------------- */

static inline uint64_t
sp_zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

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

/* -- shared kernels (defined in _keymap.c and _walk.c) ------------------------------------------------------- */

/* xxh3-128 of a key as two signed int64 (high, low): offset_map.key_hash. */
void sp_key_hash(const uint8_t *key, size_t len, int64_t *hi, int64_t *lo);

/* CRC-32C (Castagnoli) of buf[0:len). */
uint32_t sp_crc32c(const uint8_t *buf, size_t len);

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
