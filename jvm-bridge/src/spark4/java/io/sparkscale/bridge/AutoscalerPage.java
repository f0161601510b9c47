package io.sparkscale.bridge;

import jakarta.servlet.http.HttpServletRequest;

import org.apache.spark.ui.WebUIPage;

import scala.collection.immutable.Seq;
import scala.xml.Node;

/**
 * The tab's only page, Spark 4 flavour: Spark 4 serves its UI with {@code jakarta.servlet}, Spark 3.5 with
 * {@code javax.servlet}, and the type of the request in this override is the only reason this class exists once
 * per line. The page itself is {@link PageFrame#render}, shared by every line.
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
