package metahost

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
)

// FormatConfig is what the format step records in a metadata replica's directory.
type FormatConfig struct {
	Dir     string
	Cluster uint64
	Node    uint16
	Replica uint8 // the replica's member index in the metadata group
	// Recover: the replica replaces one whose disk was lost, in a group that is running. It starts in
	// recovery and acts on nothing until a quorum has told it the group's state. Without it the
	// replica is a member of a cluster being created: it starts fresh, at view 0 with an empty log,
	// which is safe only while no member of the group has acknowledged anything.
	Recover bool
}

// ErrFormatted: Format found a superblock in the directory; a formatted replica is never
// formatted over.
var ErrFormatted = errors.New("engine: metadata directory already formatted")

// Format makes a metadata replica's directory: the empty snapshot files first, then the log file,
// its header area holding the format step's superblock in every copy of both areas and no records,
// each file fsynced, then the directory and its parent fsynced, so that the files outlive a power loss
// right after it returns. A directory where any superblock copy decodes is refused (ErrFormatted);
// a format that stopped half way (no superblock written) is done again.
//
// This is how a replica that lost its state is told apart from a new one: only a format makes a
// directory a replica can start from, and the operator (or cluster creation) says with Recover which
// of the two it is. A directory found missing or empty at start never starts (ErrUnformatted).
func Format(f FormatConfig) error {
	if f.Cluster == 0 || f.Node == 0 || int(f.Replica) >= vsr.MembersMax {
		return fmt.Errorf("%w: format needs a cluster id, a node id and a replica index below %d", ErrConfig,
			vsr.MembersMax)
	}
	logPath := filepath.Join(f.Dir, metaLogFile)
	if b, err := os.ReadFile(logPath); err == nil {
		copies, _ := splitLogFile(b)
		for _, c := range copies {
			if sb, err := vsr.DecodeSuperblock(c); err == nil {
				return fmt.Errorf("%w: %s holds the superblock of cluster %d node %d replica %d", ErrFormatted,
					f.Dir, sb.Cluster, sb.Node, sb.Replica)
			}
		}
	}
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return fmt.Errorf("%w: format: %w", ErrStorage, err)
	}
	for _, name := range []string{fmt.Sprintf(metaSnapshotFile, 0), fmt.Sprintf(metaSnapshotFile, 1)} {
		if err := writeSynced(filepath.Join(f.Dir, name), nil); err != nil {
			return err
		}
	}
	id := vsr.Identity{Cluster: f.Cluster, Node: f.Node, Replica: f.Replica}
	if err := writeSynced(logPath, appendHeader(nil, vsr.FormatSuperblock(id, f.Recover))); err != nil {
		return err
	}
	if err := syncDir(f.Dir); err != nil {
		return fmt.Errorf("%w: format: fsync %s: %w", ErrStorage, f.Dir, err)
	}
	if err := syncDir(filepath.Dir(filepath.Clean(f.Dir))); err != nil {
		return fmt.Errorf("%w: format: fsync the parent of %s: %w", ErrStorage, f.Dir, err)
	}
	return nil
}

// appendHeader appends the log file's header area with sb in every copy slot of both areas.
func appendHeader(dst []byte, sb vsr.Superblock) []byte {
	for i := 0; i < vsr.SuperblockSlots; i++ {
		start := len(dst)
		dst = vsr.AppendSuperblock(dst, sb)
		dst = append(dst, make([]byte, vsr.CopySlotSize-(len(dst)-start))...)
	}
	return dst
}

// writeSynced creates (or truncates) path with b and fsyncs it.
func writeSynced(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("%w: format: %w", ErrStorage, err)
	}
	defer unix.Close(fd)
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			return fmt.Errorf("%w: format: write %s: %w", ErrStorage, path, err)
		}
		off += n
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("%w: format: fsync %s: %w", ErrStorage, path, err)
	}
	return nil
}

// recoveryNonce draws the nonce of a recovery (vsr.Durable.RecoveryNonce): random, never 0.
func recoveryNonce() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("%w: recovery nonce: %w", ErrStorage, err)
	}
	return binary.LittleEndian.Uint64(b[:]) | 1, nil
}
