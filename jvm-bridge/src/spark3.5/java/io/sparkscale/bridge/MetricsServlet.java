package io.sparkscale.bridge;

import java.io.IOException;

import javax.servlet.http.HttpServlet;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;

/**
 * Serves the autoscaler's gauges in the Prometheus text format at {@code /autoscaler/metrics} on the driver UI
 * ({@link MetricsEndpoint} attaches it), javax.servlet flavour: the other line's copy differs only in the servlet
 * namespace (jakarta.servlet, Spark 4). The text is the one Python published last (sparkscale_listener/gauges.py).
 */
final class MetricsServlet extends HttpServlet {
  private static final long serialVersionUID = 1L;

  @Override
  protected void doGet(HttpServletRequest request, HttpServletResponse response) throws IOException {
    response.setStatus(HttpServletResponse.SC_OK);
    response.setContentType(MetricsEndpoint.CONTENT_TYPE);
    response.setHeader("Cache-Control", "no-cache, no-store");
    response.getWriter().write(SparkscaleBridge.latestMetrics());
  }
}
