// Package clustertest holds the cluster tests with real processes: a local cluster of `ringstream
// serve` processes on 127.0.0.1 (localcluster), load from the Go client through the bench
// (package bench), faults by signal (SIGKILL, SIGTERM), and the bench's verification that every
// confirmed record is read back at exactly one offset. TestMain builds cmd/ringstream once per run.
//
// Each test keeps its load to a few seconds so that the package stays within about two minutes.
package clustertest
