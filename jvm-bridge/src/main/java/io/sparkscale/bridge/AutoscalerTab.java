package io.sparkscale.bridge;

import org.apache.spark.SparkContext;
import org.apache.spark.ui.SparkUI;
import org.apache.spark.ui.SparkUITab;

import scala.Option;

/**
 * The "Autoscaler" tab, served at {@code /autoscaler/}: on the driver UI while the application runs (content: the
 * latest status Python published) and in the History Server afterwards (content: rebuilt from the event log, see
 * {@link HistoryPlugin}). Spark names the tab after its prefix (capitalized), and lists it in the navigation bar of
 * every page once attached.
 */
final class AutoscalerTab extends SparkUITab {
  static final String PREFIX = "autoscaler";

  /** The HTML inside Spark's page frame, rendered when someone opens the page. */
  interface Content {
    String html(long nowMs);
  }

  private final SparkUI ui;
  private final Content content;
  private final boolean live;

  private AutoscalerTab(SparkUI ui, Content content, boolean live) {
    super(ui, PREFIX);
    this.ui = ui;
    this.content = content;
    this.live = live;
    attachPage(new AutoscalerPage(this));
  }

  /**
   * Attaches the live tab when the application has a UI ({@code spark.ui.enabled=false} leaves {@code sc.ui()}
   * empty: then nothing happens and null is returned). Safe from {@code DriverPlugin.init}: SparkContext creates and
   * binds its UI before it initialises plugins, and a handler added to a bound Jetty server is served at once.
   */
  static AutoscalerTab attachTo(SparkContext sc) {
    Option<SparkUI> maybeUi = sc.ui();
    if (maybeUi.isEmpty()) {
      return null;
    }
    Content latest = now -> StatusPage.render(SparkscaleBridge.latestStatus(), SparkscaleBridge.latestStatusMs(), now);
    return attach(maybeUi.get(), latest, true);
  }

  /** Attaches a tab that shows a finished (or replayed) application: no self-refresh. */
  static AutoscalerTab attachToHistory(SparkUI ui, Content content) {
    return attach(ui, content, false);
  }

  private static AutoscalerTab attach(SparkUI ui, Content content, boolean live) {
    AutoscalerTab tab = new AutoscalerTab(ui, content, live);
    ui.attachTab(tab);
    return tab;
  }

  String html(long nowMs) {
    return content.html(nowMs);
  }

  /** True on the driver UI: the page then refreshes itself while the application runs. */
  boolean live() {
    return live;
  }

  SparkUI ui() {
    return ui;
  }

  void detach() {
    ui.detachTab(this);
  }
}
