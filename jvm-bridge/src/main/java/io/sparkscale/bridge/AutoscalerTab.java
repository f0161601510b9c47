package io.sparkscale.bridge;

import org.apache.spark.SparkContext;
import org.apache.spark.ui.SparkUI;
import org.apache.spark.ui.SparkUITab;

import scala.Option;

/**
 * The "Autoscaler" tab of the driver UI, served at {@code /autoscaler/}. Spark names the tab after its prefix
 * (capitalized), and lists it in the navigation bar of every page once attached.
 */
final class AutoscalerTab extends SparkUITab {
  static final String PREFIX = "autoscaler";

  private final SparkUI ui;

  private AutoscalerTab(SparkUI ui) {
    super(ui, PREFIX);
    this.ui = ui;
    attachPage(new AutoscalerPage(this));
  }

  /**
   * Attaches the tab when the application has a UI ({@code spark.ui.enabled=false} leaves {@code sc.ui()} empty:
   * then nothing happens and null is returned). Safe from {@code DriverPlugin.init}: SparkContext creates and binds
   * its UI before it initialises plugins, and a handler added to a bound Jetty server is served at once.
   */
  static AutoscalerTab attachTo(SparkContext sc) {
    Option<SparkUI> maybeUi = sc.ui();
    if (maybeUi.isEmpty()) {
      return null;
    }
    AutoscalerTab tab = new AutoscalerTab(maybeUi.get());
    maybeUi.get().attachTab(tab);
    return tab;
  }

  void detach() {
    ui.detachTab(this);
  }
}
