package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// IdentityFile is the name, under the data directory, of the file that records which cluster and
// node the directory belongs to.
const IdentityFile = "identity"

// identityMagic starts the identity file: "RSID", then version 1.
const (
	identityMagic   = 0x44495352 // "RSID" little endian
	identityVersion = 1
	identitySize    = 24 // magic u32 | version u32 | cluster u64 | node u16 | reserved [2] | crc32c u32
)

// Identity is what a data directory records about its owner.
type Identity struct {
	Cluster uint64
	Node    uint16
}

func appendIdentity(dst []byte, id Identity) []byte {
	var b [identitySize]byte
	binary.LittleEndian.PutUint32(b[0:], identityMagic)
	binary.LittleEndian.PutUint32(b[4:], identityVersion)
	binary.LittleEndian.PutUint64(b[8:], id.Cluster)
	binary.LittleEndian.PutUint16(b[16:], id.Node)
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], crc32.MakeTable(crc32.Castagnoli)))
	return append(dst, b[:]...)
}

// DecodeIdentity reads an identity file's bytes. It never panics: anything but a whole, checksummed
// record of this version is an error naming what is wrong.
func DecodeIdentity(b []byte) (Identity, error) {
	switch {
	case len(b) != identitySize:
		return Identity{}, fmt.Errorf("%w: %d bytes, want %d", ErrIdentityFile, len(b), identitySize)
	case binary.LittleEndian.Uint32(b[0:]) != identityMagic:
		return Identity{}, fmt.Errorf("%w: not an identity file (magic %#x)", ErrIdentityFile, binary.LittleEndian.Uint32(b[0:]))
	case binary.LittleEndian.Uint32(b[20:]) != crc32.Checksum(b[:20], crc32.MakeTable(crc32.Castagnoli)):
		return Identity{}, fmt.Errorf("%w: checksum mismatch", ErrIdentityFile)
	case binary.LittleEndian.Uint32(b[4:]) != identityVersion:
		return Identity{}, fmt.Errorf("%w: version %d, this build reads %d", ErrIdentityFile, binary.LittleEndian.Uint32(b[4:]), identityVersion)
	case b[18] != 0 || b[19] != 0:
		return Identity{}, fmt.Errorf("%w: reserved bytes not zero", ErrIdentityFile)
	}
	id := Identity{Cluster: binary.LittleEndian.Uint64(b[8:]), Node: binary.LittleEndian.Uint16(b[16:])}
	if id.Cluster == 0 || id.Node == 0 {
		return Identity{}, fmt.Errorf("%w: cluster %d node %d", ErrIdentityFile, id.Cluster, id.Node)
	}
	return id, nil
}

// ErrIdentityFile: the identity file exists but does not decode (torn, damaged, another format).
var ErrIdentityFile = errors.New("engine: identity file unreadable")

// CheckIdentity makes sure dir belongs to cluster and node, and records them there if it records
// nothing yet (first boot): see VerifyIdentity and WriteIdentity.
func CheckIdentity(dir string, cluster uint64, node uint16) error {
	found, err := VerifyIdentity(dir, cluster, node)
	if err != nil || found {
		return err
	}
	return WriteIdentity(dir, Identity{Cluster: cluster, Node: node})
}

// VerifyIdentity checks dir's identity file against cluster and node. A directory that records
// another cluster or node is refused with ErrIdentity naming both; an unreadable identity file with
// ErrIdentityFile (wrapped in ErrIdentity). found is false when the directory records nothing yet.
// The metadata replica's superblock records the same identity and its open checks it again.
func VerifyIdentity(dir string, cluster uint64, node uint16) (found bool, err error) {
	want := Identity{Cluster: cluster, Node: node}
	path := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("engine: read %s: %w", path, err)
	}
	got, err := DecodeIdentity(b)
	if err != nil {
		return true, fmt.Errorf("%w: %s: %w", ErrIdentity, path, err)
	}
	if got != want {
		return true, fmt.Errorf("%w: %s belongs to cluster %d node %d, this node is cluster %d node %d",
			ErrIdentity, dir, got.Cluster, got.Node, cluster, node)
	}
	return true, nil
}

// WriteIdentity records id in dir (created if missing), durably: temporary file, fsync, rename,
// directory fsync, parent fsync, so it outlives a power loss.
func WriteIdentity(dir string, id Identity) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("engine: data directory: %w", err)
	}
	tmp := filepath.Join(dir, IdentityFile+".tmp")
	if err := writeFileSynced(tmp, appendIdentity(nil, id)); err != nil {
		return fmt.Errorf("engine: identity: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, IdentityFile)); err != nil {
		return fmt.Errorf("engine: identity: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("engine: identity: fsync %s: %w", dir, err)
	}
	if err := syncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
		return fmt.Errorf("engine: identity: fsync the parent of %s: %w", dir, err)
	}
	return nil
}

// writeFileSynced creates (or truncates) path with b and fsyncs it.
func writeFileSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs directory dir, so the names created or renamed in it outlive a power loss.
func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
