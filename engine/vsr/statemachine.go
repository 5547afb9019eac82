package vsr

// StateMachine is the replicated state that committed ops drive. engine/meta implements it for the
// metadata group; engine/sim tests use a small key-value machine.
//
// The replica calls every method from its one goroutine, in op order, and only for committed ops: a
// StateMachine never sees an op that a view change could still undo. Ops are opaque bytes to vsr: the
// replica orders, replicates and persists them, and the StateMachine gives them meaning.
//
// Determinism is the whole contract: two StateMachines that restored the same snapshot and applied the
// same ops at the same op numbers hold the same state, return the same results and report the same
// Digest. Apply therefore reads no clock, draws no random numbers and ranges over no map unsorted.
type StateMachine interface {
	// Apply applies op, the committed op numbered opNumber, appends its result to result (passed with
	// length 0 and a capacity the replica keeps between calls) and returns the extended slice.
	//
	// Apply does not fail: an op it cannot decode, or whose guard does not hold, leaves the state
	// unchanged and produces a result that says why. The op bytes came from a client, so Apply never
	// panics on them. It must not retain op or result after it returns.
	Apply(op []byte, opNumber uint64, result []byte) []byte

	// AppendSnapshot appends an encoding of the whole state to dst and returns the extended slice.
	// The replica stores it as a checkpoint and sends it to a replica too far behind to repair from
	// the log.
	AppendSnapshot(dst []byte) []byte

	// Restore replaces the whole state with one encoded by AppendSnapshot. The bytes come from a disk
	// or a peer: on bytes it cannot decode, Restore returns an error and leaves the state unchanged.
	Restore(snapshot []byte) error

	// Digest is a deterministic 64-bit digest of the whole state. The simulator checks that replicas
	// at the same commit report equal digests.
	Digest() uint64
}
