package io.sparkscale.bridge;

import jakarta.servlet.http.HttpServletRequest;

import org.apache.spark.ui.UIUtils;
import org.apache.spark.ui.WebUIPage;

import scala.Function0;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.xml.Node;
import scala.xml.Unparsed;

/**
 * The tab's only page. Python publishes a JSON document at every control tick ({@link SparkscaleBridge#publishStatus});
 * the page renders the latest one at request time, so a page nobody looks at costs nothing.
 */
final class AutoscalerPage extends WebUIPage {
  private final AutoscalerTab tab;

  AutoscalerPage(AutoscalerTab tab) {
    super("");
    this.tab = tab;
  }

  @Override
  public Seq<Node> render(HttpServletRequest request) {
    String html;
    try {
      html = StatusPage.render(SparkscaleBridge.latestStatus(), SparkscaleBridge.latestStatusMs(),
          System.currentTimeMillis());
    } catch (RuntimeException e) {
      // A malformed document must cost a message on the page, never a 500 from the driver UI.
      html = "<div class=\"alert alert-danger\">The autoscaler status could not be rendered: "
          + StatusPage.esc(e.toString()) + "</div>";
    }
    // Unparsed is a Node, and a Node is a Seq<Node>: the ready HTML goes into Spark's page frame as it is.
    Seq<Node> content = new Unparsed(html);
    Function0<Seq<Node>> body = () -> content;
    return UIUtils.headerSparkPage(request, "Autoscaler", body, tab, Option.<String>empty(), false, false, false);
  }
}
