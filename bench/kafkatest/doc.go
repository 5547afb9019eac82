// Package kafkatest holds the tests of the Kafka listener with third-party clients against real
// `ringstream serve` processes (localcluster): kcat (Debian's package, librdkafka) lists, produces and
// consumes; franz-go's kgo produces to and consumes a topic of several partitions. TestMain builds
// cmd/ringstream once per run.
//
// kcat is an external program: without it the kcat test skips and says so, unless
// RINGSTREAM_REQUIRE_KCAT=1 (CI sets it) or CI=true, which make its absence a failure.
package kafkatest
