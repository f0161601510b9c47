package io.sparkscale.bridge;

import java.util.Properties;

/**
 * The streaming query / batch a stage or task belongs to.
 *
 * @param batchId null when the job was not a micro-batch job
 */
record Tag(String queryId, String batchId, int jobId) {
  // Job-local properties set by Structured Streaming (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
  static final String QUERY_ID_KEY = "sql.streaming.queryId";
  static final String BATCH_ID_KEY = "streaming.sql.batchId";

  /** The tag of a job with these job-local properties, null when the job belongs to no streaming query. */
  static Tag of(Properties props, int jobId) {
    if (props == null) {
      return null;
    }
    String queryId = props.getProperty(QUERY_ID_KEY);
    if (queryId == null || queryId.isEmpty()) {
      return null;
    }
    return new Tag(queryId, props.getProperty(BATCH_ID_KEY), jobId);
  }
}
