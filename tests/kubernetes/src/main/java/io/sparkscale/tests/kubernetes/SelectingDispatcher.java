package io.sparkscale.tests.kubernetes;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.fabric8.kubernetes.client.server.mock.KubernetesCrudDispatcher;
import io.fabric8.mockwebserver.dsl.HttpMethod;
import io.fabric8.mockwebserver.http.Buffer;
import io.fabric8.mockwebserver.http.MockResponse;
import io.fabric8.mockwebserver.http.RecordedRequest;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Predicate;
import java.util.regex.Pattern;

/**
 * fabric8's CRUD dispatcher with the three things a real API server does that Spark's Kubernetes
 * backend relies on and the mock does not:
 *
 * <ul>
 *   <li>a pod is created with {@code status.phase: Pending} (the mock stores no status, and Spark's
 *       pod snapshot then fails on the missing phase);
 *   <li>list GETs and collection DELETEs honour label selectors ({@code =}, {@code ==}, {@code !=},
 *       {@code in}, {@code notin}, {@code key}, {@code !key}) and field selectors ({@code =},
 *       {@code !=} on any field path, as {@code status.phase=Pending}); the mock ignores set-based
 *       selectors, so Spark's "delete these executors" would delete every executor of the app;
 *   <li>a collection DELETE deletes each selected object the way a single DELETE does, so that a
 *       finalizer (which the test kubelet puts on its pods) turns it into a deletionTimestamp first;
 *   <li>a server-side apply ({@code PATCH} as {@code application/apply-patch+yaml}, how Spark 4 creates
 *       a cluster-mode driver's service and config map) creates the object when it does not exist and
 *       merges into it when it does (field ownership is not kept: one manager applies here).
 * </ul>
 *
 * Watches (websockets) are the mock's own; Spark's watch uses equality selectors, which it handles.
 */
final class SelectingDispatcher extends KubernetesCrudDispatcher {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern POD_COLLECTION = Pattern.compile("^/api/v1/namespaces/[^/]+/pods/?$");

  @Override
  public MockResponse handleCreate(RecordedRequest request) {
    String path = basePath(request.getPath());
    if (!POD_COLLECTION.matcher(path).matches()) {
      return super.handleCreate(request);
    }
    ObjectNode pod = (ObjectNode) read(request.getUtf8Body());
    if (!pod.path("status").hasNonNull("phase")) {
      pod.putObject("status").put("phase", "Pending");
    }
    Buffer body = new Buffer(write(pod).getBytes(StandardCharsets.UTF_8));
    return super.handleCreate(
        new RecordedRequest(request.getHttpVersion(), request.method(), request.getPath(), request.getHeaders(), body));
  }

  @Override
  public MockResponse handlePatch(RecordedRequest request) {
    String type = String.valueOf(request.getHeader("Content-Type"));
    if (!type.contains("apply-patch")) {
      return super.handlePatch(request);
    }
    String path = basePath(request.getPath());
    JsonNode applied = read(request.getUtf8Body());
    MockResponse existing = super.handleGet(path);
    if (existing.code() == 404) {
      String collection = path.substring(0, path.lastIndexOf('/'));
      Buffer body = new Buffer(write(applied).getBytes(StandardCharsets.UTF_8));
      return handleCreate(new RecordedRequest(request.getHttpVersion(), HttpMethod.POST,
          collection, request.getHeaders(), body));
    }
    ObjectNode merged = (ObjectNode) read(existing.getBody().readUtf8());
    merge(merged, applied);
    Buffer body = new Buffer(write(merged).getBytes(StandardCharsets.UTF_8));
    return super.handleUpdate(new RecordedRequest(request.getHttpVersion(), HttpMethod.PUT,
        path, request.getHeaders(), body));
  }

  /** Objects merged member by member, anything else replaced (what one apply of one manager does). */
  private static void merge(ObjectNode into, JsonNode from) {
    from.fields().forEachRemaining(field -> {
      JsonNode old = into.get(field.getKey());
      if (old instanceof ObjectNode target && field.getValue().isObject()) {
        merge(target, field.getValue());
      } else {
        into.set(field.getKey(), field.getValue());
      }
    });
  }

  @Override
  public MockResponse handleGet(String path) {
    Selection selection = Selection.of(path);
    if (selection == null || query(path, "watch") != null) {
      return super.handleGet(path);
    }
    MockResponse response = super.handleGet(selection.unselectedPath);
    return filtered(response, selection);
  }

  @Override
  public MockResponse handleDelete(String path) {
    Selection selection = Selection.of(path);
    if (selection == null) {
      return super.handleDelete(path);
    }
    MockResponse listed = filtered(super.handleGet(selection.unselectedPath), selection);
    JsonNode list = read(listed.getBody().readUtf8());
    ArrayNode deleted = JSON.createArrayNode();
    for (JsonNode item : list.path("items")) {
      String name = item.path("metadata").path("name").asText();
      String namespace = item.path("metadata").path("namespace").asText();
      MockResponse one = super.handleDelete(itemPath(basePath(path), namespace, name));
      if (one.code() / 100 == 2) {
        deleted.add(item);
      }
    }
    ObjectNode body = ((ObjectNode) list).deepCopy();
    body.set("items", deleted);
    return new MockResponse().setResponseCode(200).setBody(write(body));
  }

  private static MockResponse filtered(MockResponse response, Selection selection) {
    if (response.code() != 200) {
      return response;
    }
    JsonNode list = read(response.getBody().readUtf8());
    if (!list.has("items")) {
      return response.setBody(write(list));
    }
    ArrayNode kept = JSON.createArrayNode();
    list.path("items").forEach(item -> {
      if (selection.matches(item)) {
        kept.add(item);
      }
    });
    ((ObjectNode) list).set("items", kept);
    return response.setBody(write(list));
  }

  /** The path of one object in a collection path (namespaced or across namespaces). */
  static String itemPath(String collection, String namespace, String name) {
    if (collection.contains("/namespaces/")) {
      return collection + "/" + name;
    }
    int slash = collection.lastIndexOf('/');
    return collection.substring(0, slash) + "/namespaces/" + namespace + collection.substring(slash) + "/" + name;
  }

  static String basePath(String path) {
    int question = path.indexOf('?');
    String base = question < 0 ? path : path.substring(0, question);
    return base.endsWith("/") ? base.substring(0, base.length() - 1) : base;
  }

  static String query(String path, String key) {
    int question = path.indexOf('?');
    if (question < 0) {
      return null;
    }
    for (String pair : path.substring(question + 1).split("&")) {
      int eq = pair.indexOf('=');
      String name = URLDecoder.decode(eq < 0 ? pair : pair.substring(0, eq), StandardCharsets.UTF_8);
      if (name.equals(key)) {
        return eq < 0 ? "" : URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8);
      }
    }
    return null;
  }

  private static JsonNode read(String text) {
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static String write(JsonNode node) {
    try {
      return JSON.writeValueAsString(node);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The label and field selectors of a request, and its path without them. */
  static final class Selection {
    final String unselectedPath;
    final List<Predicate<JsonNode>> requirements = new ArrayList<>();

    private Selection(String unselectedPath) {
      this.unselectedPath = unselectedPath;
    }

    static Selection of(String path) {
      String labels = query(path, "labelSelector");
      String fields = query(path, "fieldSelector");
      if (labels == null && fields == null) {
        return null;
      }
      int question = path.indexOf('?');
      StringBuilder rest = new StringBuilder();
      for (String pair : path.substring(question + 1).split("&")) {
        String name = pair.contains("=") ? pair.substring(0, pair.indexOf('=')) : pair;
        if (!name.equals("labelSelector") && !name.equals("fieldSelector")) {
          rest.append(rest.length() == 0 ? "?" : "&").append(pair);
        }
      }
      Selection selection = new Selection(path.substring(0, question) + rest);
      if (labels != null) {
        for (String term : splitTerms(labels)) {
          selection.requirements.add(labelRequirement(term.trim()));
        }
      }
      if (fields != null) {
        for (String term : fields.split(",")) {
          selection.requirements.add(fieldRequirement(term.trim()));
        }
      }
      return selection;
    }

    boolean matches(JsonNode item) {
      return requirements.stream().allMatch(r -> r.test(item));
    }

    /** Commas separate terms, except inside the parentheses of {@code in (a,b)}. */
    private static List<String> splitTerms(String selector) {
      List<String> terms = new ArrayList<>();
      int depth = 0;
      int start = 0;
      for (int i = 0; i < selector.length(); i++) {
        char c = selector.charAt(i);
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
        if (c == ',' && depth == 0) {
          terms.add(selector.substring(start, i));
          start = i + 1;
        }
      }
      terms.add(selector.substring(start));
      terms.removeIf(t -> t.isBlank());
      return terms;
    }

    private static Predicate<JsonNode> labelRequirement(String term) {
      String[] setBased = term.split("\\s+(?=(in|notin)\\s*\\()", 2);
      if (setBased.length == 2) {
        String key = setBased[0].trim();
        String operator = setBased[1].substring(0, setBased[1].indexOf('(')).trim();
        String inside = setBased[1].substring(setBased[1].indexOf('(') + 1, setBased[1].lastIndexOf(')'));
        List<String> values = Arrays.stream(inside.split(",")).map(String::trim).toList();
        boolean in = operator.equals("in");
        return item -> {
          JsonNode value = item.path("metadata").path("labels").get(key);
          boolean member = value != null && values.contains(value.asText());
          return in == member;
        };
      }
      if (term.startsWith("!")) {
        String key = term.substring(1).trim();
        return item -> !item.path("metadata").path("labels").has(key);
      }
      if (!term.contains("=")) {
        return item -> item.path("metadata").path("labels").has(term);
      }
      return equality(term, item -> item.path("metadata").path("labels"));
    }

    private static Predicate<JsonNode> fieldRequirement(String term) {
      return equality(term, item -> item);
    }

    /** {@code key=value}, {@code key==value} or {@code key!=value}; a dotted key is a field path. */
    private static Predicate<JsonNode> equality(String term, java.util.function.Function<JsonNode, JsonNode> root) {
      boolean negated = term.contains("!=");
      String[] parts = term.split("!=|==|=", 2);
      String key = parts[0].trim();
      String expected = parts[1].trim();
      return item -> {
        JsonNode node = root.apply(item);
        if (node == null || node.isMissingNode()) {
          return negated;
        }
        JsonNode value = node.get(key);
        if (value == null && key.contains(".")) {
          value = node;
          for (String part : key.split("\\.")) {
            value = value.path(part);
          }
        }
        boolean equal = value != null && !value.isMissingNode() && value.asText().equals(expected);
        return negated != equal;
      };
    }
  }
}
