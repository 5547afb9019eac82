// Package partitiontest holds the partition test across real network hosts (issue 13): three
// `ringstream serve` processes, each in a network namespace the test makes (ip netns, veth pairs on a
// bridge in a private /24), load from the Go client in the test's own namespace, and the owner's
// node cut off by an nftables rule in its namespace that drops everything but loopback.
//
// The test needs root, ip (iproute2) and nft (nftables). Without them it skips with the reason,
// except where CI=true or RINGSTREAM_REQUIRE_NETNS=1: there a missing tool or privilege fails it,
// so CI never loses it silently. .ci/run installs both tools where missing.
//
// Decisions where the design is silent:
//   - The namespaces and the root-side link are named rsp<pid><letter>[n]; a run first removes those
//     whose creating process is gone (a crashed run's), and t.Cleanup removes its own, killing what
//     still runs in them. The /24 is 10.213.(pid mod 250 + 1).0.
//   - The bridge lives in a hub namespace, not the root one, so the host's firewall rules never see
//     the nodes' traffic; the test process reaches the bridge over a veth pair of its own.
//   - The cut node is observed from inside its namespace: its own address is reached over loopback,
//     which the rule lets through. The probe runs on an OS thread moved into that namespace
//     (setns), which is discarded afterwards.
//   - The old owner's unconfirmed suffix is made on purpose: during the cut, a probe inside its
//     namespace produces one large batch to it, which it appends but cannot confirm. After the heal
//     its copy's tails must come back to the new owner's, below that suffix: the cut is seen in the
//     tails /v1/status reports, and the probe's records must never be read back.
//   - R24 is checked on both groups the cut node leads: the metadata primary must step down, and the
//     stream owner must refuse a fetch as unavailable with its copy's own R24 message (the probe
//     client's attempts are logged, so a lookup refused by the metadata group does not count), each
//     within commit_heartbeat_timeout plus 3 s for ticks that run late on a loaded machine.
//   - The timeouts are short (tick 10 ms, commit_heartbeat_timeout 2 s, R9's floor, below
//     node_liveness_timeout 3 s) and the failover has no upper bound but the wait's 30 s: on a loaded
//     machine the metadata group's view change can take much longer than its timeouts.
//   - TestMain builds cmd/ringstream once per run.
package partitiontest
