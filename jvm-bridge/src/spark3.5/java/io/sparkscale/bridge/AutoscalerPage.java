package io.sparkscale.bridge;

import javax.servlet.http.HttpServletRequest;

import org.apache.spark.ui.WebUIPage;

import scala.collection.immutable.Seq;
import scala.xml.Node;

/**
 * The tab's only page, Spark 3.5 flavour: Spark 3.5 serves its UI with {@code javax.servlet}, Spark 4 with
 * {@code jakarta.servlet}, and the type of the request in this override is the only reason this class exists once
 * per line. The page itself is {@link PageFrame#render}, shared by every line.
 *
 * <p>The same file builds for Scala 2.12 and 2.13: {@code render} returns {@code scala.collection.Seq} on 2.12 and
 * {@code scala.collection.immutable.Seq} on 2.13, and an immutable Seq is a valid (covariant) override of both.
 */
final class AutoscalerPage extends WebUIPage {
  private final AutoscalerTab tab;

  AutoscalerPage(AutoscalerTab tab) {
    super("");
    this.tab = tab;
  }

  @Override
  public Seq<Node> render(HttpServletRequest request) {
    return PageFrame.render(request, tab);
  }
}
