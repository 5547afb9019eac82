package ring

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"golang.org/x/sys/unix"
)

// ErrInvalidConfig: Config holds a value New cannot use (an unknown backend, Entries not a power of
// two or out of range).
var ErrInvalidConfig = errors.New("ring: invalid config")

const (
	entriesDefault = 256
	entriesMax     = 32768 // the kernel's IORING_MAX_ENTRIES
)

// New creates a ring on the calling goroutine's OS thread. The caller must have called
// runtime.LockOSThread and must call every method of the ring from that thread.
//
// With BackendAuto, New tries io_uring and falls back to plain syscalls when the kernel refuses it
// (ENOSYS, EPERM, kernel.io_uring_disabled); the reason is logged and kept in Info.FallbackReason.
func New(cfg Config) (Ring, error) {
	return newRing(cfg, setupSyscall)
}

// newRing is New with the io_uring_setup call as a parameter, so tests can play a kernel that
// refuses some flag sets or io_uring altogether.
func newRing(cfg Config, setup setupFunc) (Ring, error) {
	if cfg.Backend == "" {
		cfg.Backend = BackendAuto
	}
	if cfg.Entries == 0 {
		cfg.Entries = entriesDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TaskRun == "" {
		cfg.TaskRun = TaskRunCoop
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Backend {
	case BackendFallback:
		return asRing(newFallback(cfg, "chosen by config"))
	case BackendIOUring:
		return asRing(newURing(cfg, setup))
	case BackendAuto:
		r, err := newURing(cfg, setup)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		cfg.Logger.Warn("ring: io_uring unavailable, using the fallback backend", "err", err)
		return asRing(newFallback(cfg, err.Error()))
	default:
		panic("ring: Validate let an unknown backend through")
	}
}

// Validate checks cfg the way New does, without creating a ring: a known backend (empty means auto),
// a known task-run mode (empty means coop) and Entries 0 (the default) or a power of two up to the
// kernel's IORING_MAX_ENTRIES.
func (cfg Config) Validate() error {
	switch cfg.Backend {
	case "", BackendAuto, BackendIOUring, BackendFallback:
	default:
		return fmt.Errorf("%w: unknown backend %q (want auto, io_uring or fallback)", ErrInvalidConfig, cfg.Backend)
	}
	switch cfg.TaskRun {
	case "", TaskRunCoop, TaskRunDefer:
	default:
		return fmt.Errorf("%w: unknown task run mode %q (want coop or defer)", ErrInvalidConfig, cfg.TaskRun)
	}
	if cfg.Entries > entriesMax || cfg.Entries&(cfg.Entries-1) != 0 {
		return fmt.Errorf("%w: entries %d is not a power of two in 1..%d", ErrInvalidConfig, cfg.Entries, entriesMax)
	}
	return nil
}

// asRing returns a nil interface, not an interface holding a nil pointer, when err is set.
func asRing[T Ring](r T, err error) (Ring, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// errnoOf extracts the errno from a syscall error as a negative completion result.
func errnoOf(err error) int32 {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return -int32(errno)
	}
	return -int32(unix.EIO)
}

// cloneInfo copies info's slices, so a caller that edits what Info returned cannot change the ring's.
func cloneInfo(info Info) Info {
	info.SetupFlags = slices.Clone(info.SetupFlags)
	info.SetupRefused = slices.Clone(info.SetupRefused)
	info.Features = slices.Clone(info.Features)
	info.Ops = slices.Clone(info.Ops)
	return info
}
