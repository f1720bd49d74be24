/*
 * The JSON the drivers of this folder speak on stdin/stdout, through Jackson (jackson-databind, shipped in the
 * same pinned package as kafka-clients): parse() gives Map (insertion-ordered), List, String, Long, Double, Boolean
 * or null; write() turns those (and Optional, other Numbers, Collections, arrays; anything else as its toString())
 * into one line of JSON.
 */

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

public final class Json {
    private static final ObjectMapper MAPPER = new ObjectMapper()
            .enable(DeserializationFeature.USE_LONG_FOR_INTS);

    private Json() { }

    public static Object parse(String text) {
        try {
            return MAPPER.readValue(text, Object.class);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("not JSON: " + e.getOriginalMessage(), e);
        }
    }

    public static String write(Object v) {
        try {
            return MAPPER.writeValueAsString(plain(v));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("cannot write JSON: " + e.getOriginalMessage(), e);
        }
    }

    /** The value as maps, lists and scalars only, so Jackson never serializes a client object as a bean. */
    private static Object plain(Object v) {
        if (v instanceof Optional) v = ((Optional<?>) v).orElse(null);
        if (v == null || v instanceof String || v instanceof Number || v instanceof Boolean) return v;
        if (v instanceof Map) {
            Map<String, Object> out = new LinkedHashMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) out.put(String.valueOf(e.getKey()), plain(e.getValue()));
            return out;
        }
        if (v instanceof Object[]) v = Arrays.asList((Object[]) v);
        if (v instanceof Collection) {
            List<Object> out = new ArrayList<>();
            for (Object o : (Collection<?>) v) out.add(plain(o));
            return out;
        }
        return v.toString();
    }
}
