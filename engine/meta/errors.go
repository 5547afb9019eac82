package meta

import "errors"

// Sentinel errors, one meaning each. Callers branch on them with errors.Is.
var (
	// ErrOpShort: the op bytes end before a field, or a list is longer than its bound allows.
	ErrOpShort = errors.New("meta: op truncated")
	// ErrOpTrailing: the op bytes go on past the op's last field.
	ErrOpTrailing = errors.New("meta: op has trailing bytes")
	// ErrOpVersion: the op was encoded by an op format version this build does not read.
	ErrOpVersion = errors.New("meta: unknown op encoding version")
	// ErrOpKind: the op kind byte names no op.
	ErrOpKind = errors.New("meta: unknown op kind")
	// ErrOpInvalid: the op decodes but breaks a rule it must hold on its own (see each Validate).
	ErrOpInvalid = errors.New("meta: invalid op")
	// ErrResult: bytes that are not exactly one encoded Result.
	ErrResult = errors.New("meta: bad result encoding")
	// ErrPolicy: a confirm policy with an unknown kind, or a count that does not fit its kind.
	ErrPolicy = errors.New("meta: invalid confirm policy")
	// ErrSnapshot: snapshot bytes that do not decode into a consistent state.
	ErrSnapshot = errors.New("meta: bad snapshot")
	// ErrSnapshotVersion: a snapshot written by a format version this build does not read.
	ErrSnapshotVersion = errors.New("meta: unknown snapshot version")
	// ErrSnapshotChecksum: the snapshot's checksum does not match its bytes.
	ErrSnapshotChecksum = errors.New("meta: snapshot checksum mismatch")
)
