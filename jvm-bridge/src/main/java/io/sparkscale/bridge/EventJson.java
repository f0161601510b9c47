package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

/** The JSON Python hands the bridge with its events, read into the events' fields. */
final class EventJson {
  // Python's json.dumps writes NaN/Infinity tokens; Jackson writes them back out as strings by default.
  private static final ObjectMapper LENIENT = JsonMapper.builder()
      .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS).build();

  private EventJson() {
  }

  /** Keeps details a JSON object in the event log; anything that is not one is kept as {"raw": text}. */
  static Map<String, Object> details(String json) {
    Map<String, Object> out = new LinkedHashMap<>();
    if (json == null || json.isBlank()) {
      return out;
    }
    try {
      JsonNode node = LENIENT.readTree(json);
      if (node != null && node.isObject()) {
        @SuppressWarnings("unchecked")
        Map<String, Object> parsed = LENIENT.convertValue(node, LinkedHashMap.class);
        return parsed;
      }
    } catch (JsonProcessingException | IllegalArgumentException e) {
      // fall through
    }
    out.put("raw", json);
    return out;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> object(Object value) {
    return value instanceof Map ? (Map<String, Object>) value : null;
  }

  @SuppressWarnings("unchecked")
  static List<Map<String, Object>> list(Object value) {
    return value instanceof List ? (List<Map<String, Object>>) value : null;
  }
}
