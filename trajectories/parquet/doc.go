// Package parquet writes troupe's output as Apache Parquet tables for
// analysis (DuckDB, pandas, Polars, Spark): one row per sample, and, from
// episode records, one row per episode, per turn, per bus message and per
// state-machine transition. The schema of each table is documented in
// docs/parquet.md; the rows carry rollout_id (and episode, the episode's
// number in its run) so that the tables join.
//
// The writers stream: they hold one row group at a time (at most 16,384
// rows or about 8 MB of text), whatever the size of the input, and they
// write the same bytes for the same input. They write through the Parquet
// file writer of Apache Arrow's Go module (github.com/apache/arrow-go,
// parquet/file), column chunk by column chunk, with zstd compression.
package parquet
