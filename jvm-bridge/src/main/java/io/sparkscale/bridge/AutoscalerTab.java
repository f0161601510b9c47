package io.sparkscale.bridge;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.ui.SparkUI;
import org.apache.spark.ui.SparkUITab;

import scala.Option;

/**
 * The "Autoscaler" tab, served at {@code /autoscaler/}: on the driver UI while the application runs and in the
 * History Server afterwards (see {@link HistoryPlugin}). Both show a {@link TabDocument} built from the autoscaler's
 * listener events, rendered by the same page ({@link PageFrame}): live, a listener feeds it as the events arrive, as
 * Spark's own tabs are fed; in the History Server, the events replayed from the event log. Spark names the tab after
 * its prefix (capitalized), and lists it in the navigation bar of every page once attached.
 */
final class AutoscalerTab extends SparkUITab {
  static final String PREFIX = "autoscaler";

  /** The document the page shows, as JSON (null before there is one), read when someone opens the page. */
  interface Content {
    String json();

    /** True on the driver UI: the page then refreshes itself while the application runs. */
    boolean live();
  }

  private final SparkUI ui;
  private final Content content;
  private final SparkContext sc;
  private final SparkListener listener;

  private AutoscalerTab(SparkUI ui, Content content, SparkContext sc, SparkListener listener) {
    super(ui, PREFIX);
    this.ui = ui;
    this.content = content;
    this.sc = sc;
    this.listener = listener;
    attachPage(new AutoscalerPage(this));
  }

  /**
   * Attaches the live tab and its listener when the application has a UI ({@code spark.ui.enabled=false} leaves
   * {@code sc.ui()} empty: then nothing happens and null is returned). Safe from {@code DriverPlugin.init}:
   * SparkContext creates and binds its UI before it initialises plugins, and a handler added to a bound Jetty server
   * is served at once. The listener is on the application-status queue, with the listeners of Spark's own tabs.
   */
  static AutoscalerTab attachTo(SparkContext sc) {
    Option<SparkUI> maybeUi = sc.ui();
    if (maybeUi.isEmpty()) {
      return null;
    }
    LiveContent live = new LiveContent();
    sc.listenerBus().addToStatusQueue(live);
    AutoscalerTab tab = new AutoscalerTab(maybeUi.get(), live, sc, live);
    maybeUi.get().attachTab(tab);
    return tab;
  }

  /** Attaches a tab that shows a finished (or replayed) application. */
  static AutoscalerTab attachToHistory(SparkUI ui, Content content) {
    AutoscalerTab tab = new AutoscalerTab(ui, content, null, null);
    ui.attachTab(tab);
    return tab;
  }

  Content content() {
    return content;
  }

  SparkUI ui() {
    return ui;
  }

  void detach() {
    ui.detachTab(this);
    if (sc != null && listener != null) {
      sc.listenerBus().removeListener(listener);
    }
  }

  /** The live tab's listener and its document: every autoscaler event Python posts goes in as it arrives. */
  static final class LiveContent extends SparkListener implements Content {
    private final TabDocument document = new TabDocument(TabDocument.SOURCE_LIVE, TabDocument.LIVE);

    @Override
    public void onOtherEvent(SparkListenerEvent event) {
      synchronized (document) {
        document.add(event);
      }
    }

    @Override
    public String json() {
      synchronized (document) {
        return document.isEmpty() ? null : document.json();
      }
    }

    @Override
    public boolean live() {
      return true;
    }
  }
}
