// Package localcluster runs a local cluster of real `ringstream serve` processes on 127.0.0.1: it
// writes each node's configuration (engine/config TOML with free ports and a cluster secret), formats
// the metadata replicas' directories with `ringstream format`, starts `ringstream serve` per node,
// waits until each node's admin HTTP answers /v1/status, and sends nodes SIGKILL, SIGSTOP, SIGCONT
// and SIGTERM or restarts them. `ringstream cluster up`, `ringstream bench` and the cluster tests
// share it.
//
// It owns the cluster's directory (one directory per node: node.toml, data/, serve.log) and the
// processes it started. It never leaves one behind: every node runs in its own process group with
// a parent-death signal of SIGKILL, Close kills every group and waits, and the context given to
// Start closes the cluster when it ends.
//
// Decisions where the design is silent:
//   - Ports are free ones outside the kernel's ephemeral range (from a random point below it): every
//     port of the cluster is bound at once, so no two are alike, then released just before the
//     configs are written. Another process may take one in between; the node then fails to start and
//     Start names the address in its error. Inside the ephemeral range a restarting node lost its
//     port to a peer's redial from that very port (a TCP self-connect: "address already in use").
//   - A node keeps its ports across restarts (they are in its config), so its peers find it again.
//   - The metadata replicas are nodes 1 to 3, or 1 to 5 for clusters of five nodes or more; a cluster
//     has at least 3 nodes.
//   - Each node's stdout and stderr go to serve.log in its directory, appended across restarts; a
//     node that exits before it is ready fails Start with the tail of that log.
//   - A node is ready when GET /v1/status on its admin address answers 200. Readiness is polled
//     every 20 ms: the process is another program, there is no event to wait on.
//   - SIGKILL goes to the node's process group; SIGSTOP, SIGCONT and SIGTERM to the process alone.
//   - With Options.Hosts (nodes in network namespaces, started through Options.Command) each node
//     listens on its own IP at HostPorts, and a restart does not wait for its ports: they live in
//     the node's namespace.
//   - The secret is 32 random bytes, hex-encoded, unless Options.Secret is set.
//   - A kept directory (node1/node.toml present) is started again by Reopen: the nodes' files are the
//     truth (ids, addresses, secret, shard count), nothing is formatted or rewritten, and the
//     directory stays after Close.
//   - Node.Exited and Node.ExitError let a caller watch the processes (`cluster up` reports a node's
//     exit at once, with LogTail).
package localcluster
