package io.sparkscale.bridge;

import java.util.ArrayList;

import scala.collection.Iterator;
import scala.collection.immutable.List;
import scala.collection.immutable.List$;

/**
 * Scala sequences to and from Java arrays, without Scala's collection converters (their Java API differs between
 * Scala 2.12 and 2.13), so one source compiles and links against both.
 */
final class ScalaSeqs {
  private static final String[] NONE = new String[0];

  private ScalaSeqs() {
  }

  /**
   * A Scala List: a {@code scala.collection.Seq} (what 2.12 builds of Spark take) and a
   * {@code scala.collection.immutable.Seq} (2.13).
   */
  static List<String> scalaList(String[] items) {
    List<String> out = List$.MODULE$.empty();
    for (int i = items.length - 1; i >= 0; i--) {
      out = out.$colon$colon(items[i]);
    }
    return out;
  }

  /** scala.collection.Seq: what Scala 2.12 builds return, and a supertype of 2.13's immutable.Seq. */
  static String[] toArray(scala.collection.Seq<String> seq) {
    ArrayList<String> out = new ArrayList<>(seq.size());
    for (Iterator<String> it = seq.iterator(); it.hasNext(); ) {
      out.add(it.next());
    }
    return out.toArray(NONE);
  }
}
