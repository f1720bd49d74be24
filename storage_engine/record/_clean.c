/* The cleaner's record filter for one magic-2 data batch (storage_engine.record._speedups; see _speedups.h).
 *
 * filter_batch(spec, batch, latest_offset, tombstones_kept, new_horizon)
 *
 * `batch` is (buf, pos, records): the batch's header at buf[pos:pos + 61], read here with _speedups.h's header
 * reader (base offset, timestamps, attributes, producer fields, leader epoch, last offset, record count, and the
 * delete horizon when the batch has one), and its records section (None: in place after the header; else the
 * decompressed section). It is the per-record half of cleaner.Cleaner._filter_batch, which holds the
 * batch-level policy (which batches reach this filter at all: control batches and legacy formats do not) and
 * the Python twin of this function (the generic path used for every other map and when the extension is not
 * loaded). A record survives if its offset is beyond `latest_offset` (the end of the mapped range), or it has a
 * key, its offset is the latest for that key in the map (`spec`, see _keymap.c) and it is not a tombstone the
 * batch may drop (`tombstones_kept` false). Keyless records at or below `latest_offset` are dropped and counted
 * as invalid. Returns
 *
 *   None                                   the Python path must handle this batch: the records section is one
 *                                          the Python decoder rejects, or the rebuild would raise in build_batch
 *                                          (a timestamp below -1, offsets out of order, ...), or an int64 would
 *                                          overflow; nothing was decided
 *   (0, read, invalid, tombstones_removed) nothing survives
 *   (1, read, invalid, tombstones_removed) everything survives and no delete horizon is needed: copy the batch
 *   (2, read, invalid, tombstones_removed, kept, records, attributes, base_timestamp, max_timestamp)
 *                                          rebuild of a compressed batch: `records` is the new records section,
 *                                          uncompressed, exactly as records.build_batch encodes the kept records
 *                                          (attributes byte 0, minimal varints, timestamp deltas against the new
 *                                          base timestamp: the delete horizon when there is one - the batch's
 *                                          own, or `new_horizon` if a kept tombstone needs one - else the first kept
 *                                          timestamp); the caller compresses it and adds the header
 *   (3, read, invalid, tombstones_removed, kept, batch, max_timestamp)
 *                                          rebuild of an uncompressed batch: the whole new batch, header and
 *                                          CRC-32C included, as records.build_batch writes it
 */
#include "_speedups.h"

/* Header count and headers from `p` (the record's header count), written canonically to `w` (or only measured
 * when `w` is NULL). The record was accepted by sp_parse_record, so every read here is in bounds. */
static int64_t
encode_headers(const uint8_t *b, int64_t p, int64_t body_end, uint8_t *w)
{
    int32_t count = 0;
    if (b[p] != 0) {
        sp_read_varint(b, body_end, &p, &count);
    }
    else {
        p += 1;
    }
    const uint64_t zc = sp_zigzag(count);
    int64_t size = sp_varint_size(zc);
    if (w) {
        w = sp_put_varint(w, zc);
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t key_len = 0, value_len = -1;
        sp_read_varint(b, body_end, &p, &key_len);
        size += sp_bytes_field_size(key_len);
        if (w) {
            w = sp_put_bytes_field(w, b + p, key_len);
        }
        p += key_len;
        sp_read_varint(b, body_end, &p, &value_len);
        size += sp_bytes_field_size(value_len);
        if (w) {
            w = sp_put_bytes_field(w, b + p, value_len);
        }
        if (value_len > 0) {
            p += value_len;
        }
    }
    return size;
}

typedef struct {
    SpRecord r;
    int64_t offset;
    int64_t timestamp;
    int64_t hi, lo;
    int keep;
} Item;

static PyObject *
py_filter_batch(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "filter_batch(spec, batch, latest_offset, tombstones_kept, new_horizon)");
        return NULL;
    }
    SpBatch batch;
    if (sp_batch_acquire(&batch, args[1]) < 0) {
        return NULL;
    }
    const SpBatchHeader *h = &batch.h;
    PyObject *result = NULL;
    Item *items = NULL;
    int map_held = 0;
    SpMap map;
    int64_t latest, new_horizon, last_offset;
    if (sp_as_i64(args[2], &latest) < 0 || sp_as_i64(args[4], &new_horizon) < 0) {
        goto done;
    }
    if (__builtin_add_overflow(h->base_offset, (int64_t)h->last_offset_delta, &last_offset)) {
        PyErr_SetString(PyExc_OverflowError, "int too big to convert");  /* as PyLong_AsLongLong(batch.last_offset) */
        goto done;
    }
    const int tombstones_kept = PyObject_IsTrue(args[3]);
    if (tombstones_kept < 0) {
        goto done;
    }
    const int64_t count = h->records_count, base_offset = h->base_offset, attributes = h->attributes & 0xFF,
        max_timestamp = h->max_timestamp;
    const int has_horizon = (attributes & SP_ATTR_DELETE_HORIZON) != 0;
    const int64_t horizon = h->base_timestamp;  /* the delete horizon, when has_horizon */
    if (count < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (count == 0) {
        result = Py_BuildValue("(iiii)", 0, 0, 0, 0);
        goto done;
    }
    if (sp_map_acquire(&map, args[0]) < 0) {
        goto done;
    }
    map_held = 1;
    if (sp_batch_records(&batch) < 0) {
        goto done;
    }
    const uint8_t *b = batch.records;
    const int64_t len = batch.records_len;
    if (count > len / 7 + 1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    items = PyMem_Malloc(sizeof(Item) * (size_t)count);
    if (items == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int log_append = (attributes & SP_ATTR_LOG_APPEND_TIME) != 0;
    int64_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        Item *it = &items[i];
        if (sp_parse_record(b, len, &pos, &it->r) < 0 ||
            __builtin_add_overflow(base_offset, (int64_t)it->r.offset_delta, &it->offset)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (log_append) {
            it->timestamp = max_timestamp;
        }
        else if (__builtin_add_overflow(h->base_timestamp, it->r.ts_delta, &it->timestamp)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (it->offset <= latest && it->r.key_len >= 0) {
            sp_key_hash(it->r.key, (size_t)it->r.key_len, &it->hi, &it->lo);
            if (map.kind == 0) {
                const uint64_t home = (uint64_t)(((unsigned __int128)(uint64_t)it->hi * map.slots) >> 64);
                __builtin_prefetch(map.table + 3 * home);
            }
        }
    }
    if (pos != len) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    int64_t kept = 0, invalid = 0, tombstones_removed = 0;
    int keeps_tombstone = 0;
    for (int64_t i = 0; i < count; i++) {
        Item *it = &items[i];
        if (it->offset > latest) {
            it->keep = 1;
        }
        else if (it->r.key_len < 0) {
            invalid++;
            it->keep = 0;
        }
        else {
            const int newest = it->offset >= sp_map_get(&map, it->hi, it->lo);
            it->keep = newest && (it->r.value_len >= 0 || tombstones_kept);
            if (newest && !it->keep) {
                tombstones_removed++;
            }
        }
        if (it->keep) {
            kept++;
            keeps_tombstone |= it->r.value_len < 0;
        }
    }
    const int needs_horizon = !has_horizon && keeps_tombstone;
    if (kept == 0) {
        result = Py_BuildValue("(iLLL)", 0, (long long)count, (long long)invalid, (long long)tombstones_removed);
        goto done;
    }
    if (kept == count && !needs_horizon) {
        result = Py_BuildValue("(iLLL)", 1, (long long)count, (long long)invalid, (long long)tombstones_removed);
        goto done;
    }
    /* Rebuild. Anything build_batch would refuse goes back to Python, which raises build_batch's error. */
    if ((attributes & SP_ATTR_TRANSACTIONAL) && h->producer_id == -1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    int64_t first_ts = 0, max_ts = INT64_MIN, prev_offset = -1, out_bound = 0;
    int first = 1;
    for (int64_t i = 0; i < count; i++) {
        const Item *it = &items[i];
        if (!it->keep) {
            continue;
        }
        if (it->timestamp < -1 || it->r.offset_delta < 0 || (!first && it->offset <= prev_offset)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (first) {
            first_ts = it->timestamp;
            first = 0;
        }
        if (it->timestamp > max_ts) {
            max_ts = it->timestamp;
        }
        prev_offset = it->offset;
        out_bound += (it->r.body_end - it->r.headers_pos) + 64 + (it->r.key_len > 0 ? it->r.key_len : 0) +
                     (it->r.value_len > 0 ? it->r.value_len : 0);
    }
    if (last_offset < prev_offset) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const int has_new_horizon = has_horizon || needs_horizon;
    const int64_t new_base_ts = needs_horizon ? new_horizon : (has_horizon ? horizon : first_ts);
    if (log_append) {
        max_ts = max_timestamp;
    }
    /* An uncompressed batch is written whole (header first); a compressed one only as its records section. */
    const int whole = (attributes & SP_ATTR_CODEC_MASK) == 0;
    const int64_t header = whole ? SP_BATCH_OVERHEAD : 0;
    PyObject *records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(out_bound + header));
    if (records == NULL) {
        goto done;
    }
    uint8_t *const batch_out = (uint8_t *)PyBytes_AS_STRING(records);
    uint8_t *const out = batch_out + header;
    uint8_t *w = out;
    for (int64_t i = 0; i < count; i++) {
        const Item *it = &items[i];
        if (!it->keep) {
            continue;
        }
        int64_t ts_delta;
        if (__builtin_sub_overflow(it->timestamp, new_base_ts, &ts_delta)) {
            Py_DECREF(records);
            result = Py_NewRef(Py_None);
            goto done;
        }
        const uint64_t zt = sp_zigzag(ts_delta), zo = sp_zigzag(it->r.offset_delta);
        const int64_t body = 1 + sp_varint_size(zt) + sp_varint_size(zo) + sp_bytes_field_size(it->r.key_len) +
                             sp_bytes_field_size(it->r.value_len) +
                             encode_headers(b, it->r.headers_pos, it->r.body_end, NULL);
        w = sp_put_varint(w, sp_zigzag(body));
        *w++ = 0;
        w = sp_put_varint(w, zt);
        w = sp_put_varint(w, zo);
        w = sp_put_bytes_field(w, it->r.key, it->r.key_len);
        w = sp_put_bytes_field(w, it->r.value, it->r.value_len);
        w += encode_headers(b, it->r.headers_pos, it->r.body_end, w);
    }
    const int64_t new_attributes = (attributes & (SP_ATTR_CODEC_MASK | SP_ATTR_LOG_APPEND_TIME |
                                                  SP_ATTR_TRANSACTIONAL | SP_ATTR_CONTROL)) |
                                   (has_new_horizon ? SP_ATTR_DELETE_HORIZON : 0);
    if (whole) {
        /* record_batch.finish_batch: the header (the batch's own producer fields, leader epoch and last offset)
         * then the CRC-32C of [attributes, end). */
        const int64_t size = (int64_t)(w - batch_out);
        const SpBatchHeader out_header = {
            .base_offset = base_offset,
            .length = (int32_t)(size - SP_LOG_OVERHEAD),
            .partition_leader_epoch = h->partition_leader_epoch,
            .magic = SP_MAGIC_V2,
            .crc = 0,
            .attributes = (int16_t)new_attributes,
            .last_offset_delta = (int32_t)(last_offset - base_offset),
            .base_timestamp = new_base_ts,
            .max_timestamp = max_ts,
            .producer_id = h->producer_id,
            .producer_epoch = h->producer_epoch,
            .base_sequence = h->base_sequence,
            .records_count = (int32_t)kept,
        };
        sp_write_batch_header(batch_out, &out_header);
        sp_put_u32(batch_out + SP_HDR_CRC,
                   sp_crc32c(batch_out + SP_HDR_ATTRIBUTES, (size_t)(size - SP_HDR_ATTRIBUTES)));
        if (_PyBytes_Resize(&records, (Py_ssize_t)size) < 0) {
            goto done;
        }
        result = Py_BuildValue("(iLLLLNL)", 3, (long long)count, (long long)invalid, (long long)tombstones_removed,
                               (long long)kept, records, (long long)max_ts);
        goto done;
    }
    if (_PyBytes_Resize(&records, (Py_ssize_t)(w - out)) < 0) {
        goto done;
    }
    result = Py_BuildValue("(iLLLLNLLL)", 2, (long long)count, (long long)invalid, (long long)tombstones_removed,
                           (long long)kept, records, (long long)new_attributes, (long long)new_base_ts,
                           (long long)max_ts);
done:
    PyMem_Free(items);
    if (map_held) {
        sp_map_release(&map);
    }
    sp_batch_release(&batch);
    return result;
}

PyMethodDef sp_clean_methods[] = {
    {"filter_batch", (PyCFunction)(void (*)(void))py_filter_batch, METH_FASTCALL,
     "filter_batch(spec, batch, latest_offset, tombstones_kept, new_horizon), batch = (buf, pos, records): "
     "see _clean.c"},
    {NULL, NULL, 0, NULL},
};
