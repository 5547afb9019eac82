// Package bench is the cluster bench behind `ringstream bench`: it starts a local cluster of real
// `ringstream serve` processes (localcluster) or dials a running one, drives load with the Go
// client, carries out faults by signal, reads every stream back, and reports (table, JSON, chart).
// `bench traffic` counts the peer frames of many groups from the nodes' metrics; `bench sweep` runs
// the same load per shard count.
//
// It owns the run's measures and its verification. It never reaches into a node: everything it knows
// about the cluster comes from the client protocol, the nodes' admin HTTP (/v1/status, /metrics,
// /debug/pprof) and /proc for the nodes' CPU and RSS.
//
// Decisions where the design is silent:
//   - Every record carries a 16-byte id (magic, producer index, sequence) followed by random bytes;
//     --record-size is at least 16. Verification reads each stream from offset 0 to past both the
//     last confirmed offset and the confirmed tail, and counts a confirmed record as missing (never
//     read), misplaced (read at another offset than its produce reply gave) or duplicated (read at
//     two offsets). Records whose produce failed are never counted missing, but a second copy of any
//     record is a duplicate.
//   - The client's Producer keeps one batch in flight while the next fills; --in-flight N runs N
//     client producers per bench producer (each its own producer id), so that N batches are in
//     flight. A client producer that fails is replaced by a new one with a new producer id; what it
//     held is counted in produce_errors, not confirmed.
//   - Latency is from the append (or, with --rate, from the record's due time in the open-loop
//     schedule, so a stall is not hidden by coordinated omission) to the confirmation; records in
//     the warmup count toward throughput and verification, not the histogram. Throughput is over
//     --duration.
//   - The failover gap is from the owner's SIGKILL to the first confirmation at an epoch above the
//     killed owner's: the old owner can confirm nothing at a newer epoch, so a reply it sent before
//     dying never ends the gap. The stall of a SIGSTOP is to the first confirmation of a record
//     appended after the signal. The new assignment is the first status of a metadata replica (the
//     primary's when it answers) naming another owner at a newer epoch.
//   - Faults aim at the first stream. Without a fault flag the owner kill is at 40% of --duration and
//     the restart 30% of it later, the spec's 8 s and 14 s of 20 s. A killed node is restarted even
//     after the end of load, since its rejoin is part of what is checked.
//   - "Rejoined without recovery" means: the owner the failover chose still owns the stream with no
//     recovery pending, the restarted old owner's copy is a follower at the stream's epoch (its return
//     as a follower moves the epoch without a recovery), and the active controller started no seal
//     after the restart (checked when the same node held the controller before and after).
//   - A node's CPU seconds and peak RSS are its current process's, read from /proc at the end: a
//     restarted node's earlier run is not counted (its restarts are).
//   - The bench's client gives a silent node 2 s (RequestTimeout) before it retries elsewhere, and a
//     connect and handshake 1 s (DialTimeout): a stopped node's kernel still accepts a connection, and
//     with the client's default of 5 s a SIGSTOP's stall measured the client, not the cluster.
//   - --owner-on-metadata-primary and --owner-off-metadata-primary place the first stream by creating
//     it again, with 1-copy filler streams moving the owner along (placement picks the node with the
//     fewest copies, then the lowest id); the fillers are deleted before the load.
//   - The traffic scenario's unbatched baseline sends the same Commit and CommitReply entries one frame
//     each: frames equal entries, and bytes grow by one frame header per entry beyond the batch frames.
//     Figures are scaled to 5 s from the measured window.
//   - The streams are PREFIX-0 .. PREFIX-N-1. On a local cluster PREFIX is "bench" (the cluster is the
//     run's alone). On a running cluster (--cluster) each run makes a new one, bench-<UTC start>-<4 hex
//     digits>, so that a run never meets what an earlier one left (an old stream's records would read
//     back as misplaced or duplicated), and deletes its streams once they are verified (--keep-streams
//     leaves them; a delete that fails is an event of the report, not a failure of the run).
//   - A pause that fails the owner over (an assignment seen by the SIGCONT, or within 3 s after it for
//     a recovery the controller started while the owner was stopped) is checked like a kill and
//     restart: the resumed old owner catches up and rejoins as a follower without another recovery.
//     A pause without a failover has no rejoin to check (the owner kept its stream). While a node is
//     stopped the bench reads no status from it (its admin HTTP would answer nothing).
//   - A timeline point (100 ms) with nothing confirmed has no p99 (null in the JSON) and the chart
//     draws no latency there: a 0 would draw an outage as the run's best latency. The timeline spans
//     the whole load, so an outage lasting to the end still shows. The chart shades each fault's gap
//     (owner kill to the first confirm at a newer epoch; SIGSTOP to the end of the stall; to the end
//     of the timeline when it never ended) red, other stretches of 200 ms or more with nothing
//     confirmed grey, and marks kill, new assignment, restart, pause, resume, caught up and rejoined.
//   - The progress line's phase is derived from the run's events (phaseOf); its p99 is of the
//     confirmations since the line before (a histogram the producers add to per confirmed batch,
//     without allocating); on a terminal it is one redrawn line, elsewhere a plain line a second.
//   - Byte figures are binary, whatever they measure: MiB (2^20 bytes) for a node's RSS and MiB/s for
//     throughput, in the table, the JSON keys (throughput_mib_per_s, mib_per_s, rss_max_mib) and the
//     sweep's columns.
//   - --client kafka runs the same load, faults and verification through franz-go on the nodes' Kafka
//     listeners (kafka.go): stream i is topic PREFIX-i's partition 0 (the stream PREFIX-i.0); each
//     of the Producers x InFlight producers is a kgo client with its default idempotent producer,
//     acks=all, one batch of --batch records in flight in a closed loop; the read-back is a kgo
//     consumer. Kafka answers carry no epoch, so the owner kill's gap ends at the first batch of
//     the stream a node other than the killed owner reports written (kgo's OnProduceBatchWritten).
//     A local cluster only; compression none or zstd.
//   - Part of the failover gap from the nodes' metrics: the mean of every histogram whose name speaks
//     of failover, seal, recovery, assignment, promotion or detection, over the run; empty where the
//     nodes export none.
package bench
