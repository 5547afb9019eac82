package ring

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// refusingSetup plays a kernel that refuses every setup flag set containing any bit of refuse with
// errno, and passes the rest to the real io_uring_setup. It records the flag sets it was asked for.
type refusingSetup struct {
	refuse uint32
	errno  unix.Errno
	asked  []uint32
}

func (s *refusingSetup) setup(entries uint32, p *uringParams) (int, unix.Errno) {
	s.asked = append(s.asked, p.flags)
	if s.refuse == 0 || p.flags&s.refuse != 0 {
		return -1, s.errno
	}
	return setupSyscall(entries, p)
}

// fallBackFrom sets a ring up in mode on a kernel that refuses every flag set holding refuse, and
// checks that it got COOP_TASKRUN without the flag named lost, and that Info lists the refused set by
// its name with the errno.
func fallBackFrom(t *testing.T, mode TaskRun, refuse uint32, lost, refusedSet string) Ring {
	t.Helper()
	lockThread(t)
	fake := &refusingSetup{refuse: refuse, errno: unix.EINVAL}
	r, err := newRing(Config{Backend: BackendIOUring, Entries: 8, Logger: quietLogger(), TaskRun: mode}, fake.setup)
	if errors.Is(err, ErrUnavailable) && !requireIOUring() {
		t.Skipf("io_uring refused: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	info := r.Info()
	if slices.Contains(info.SetupFlags, lost) || !slices.Contains(info.SetupFlags, "COOP_TASKRUN") {
		r.Close()
		t.Fatalf("accepted %v, want COOP_TASKRUN without %s", info.SetupFlags, lost)
	}
	if len(info.SetupRefused) != 1 || !strings.Contains(info.SetupRefused[0], refusedSet+": invalid argument") {
		r.Close()
		t.Fatalf("refused %v, want %s with its errno", info.SetupRefused, refusedSet)
	}
	return r
}

// TestSetupTaskRunModes: the default asks for SINGLE_ISSUER|COOP_TASKRUN first, TaskRunDefer for
// SINGLE_ISSUER|DEFER_TASKRUN; an unknown mode is refused before any setup.
func TestSetupTaskRunModes(t *testing.T) {
	lockThread(t)
	for _, c := range []struct {
		mode TaskRun
		want uint32
	}{{"", setupSingleIssuer | setupCoopTaskrun}, {TaskRunCoop, setupSingleIssuer | setupCoopTaskrun},
		{TaskRunDefer, setupSingleIssuer | setupDeferTaskrun}} {
		fake := &refusingSetup{refuse: 1 << 31, errno: unix.EINVAL} // a flag never asked for: refuses nothing
		r, err := newRing(Config{Backend: BackendIOUring, Entries: 8, Logger: quietLogger(), TaskRun: c.mode}, fake.setup)
		if errors.Is(err, ErrUnavailable) && !requireIOUring() {
			t.Skipf("io_uring refused: %v", err)
		}
		if err != nil {
			t.Fatalf("mode %q: %v", c.mode, err)
		}
		r.Close()
		optional := uint32(setupCQSize | setupSubmitAll)
		if len(fake.asked) != 1 || fake.asked[0]&^optional != c.want {
			t.Fatalf("mode %q: asked for %#x, want %#x first and alone", c.mode, fake.asked, c.want)
		}
	}
	_, err := newRing(Config{Backend: BackendIOUring, Entries: 8, Logger: quietLogger(), TaskRun: "eager"}, setupSyscall)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"eager"`) {
		t.Fatalf("unknown mode: %v, want ErrInvalidConfig naming it", err)
	}
}

// TestSetupCoopFallsBackWithoutSingleIssuer: a kernel refusing SINGLE_ISSUER (before 6.0) still gets
// COOP_TASKRUN, and Info says what was refused.
func TestSetupCoopFallsBackWithoutSingleIssuer(t *testing.T) {
	r := fallBackFrom(t, TaskRunCoop, setupSingleIssuer, "SINGLE_ISSUER", "SINGLE_ISSUER|COOP_TASKRUN")
	r.Close()
}

func TestSetupFallsBackToWeakerFlags(t *testing.T) {
	r := fallBackFrom(t, TaskRunDefer, setupDeferTaskrun, "DEFER_TASKRUN", "SINGLE_ISSUER|DEFER_TASKRUN")
	defer r.Close()
	// The ring set up with weaker flags still works.
	rec := &recorder{}
	if err := r.Nop(rec, 1, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
}

func TestAutoFallsBackWhenIOUringRefused(t *testing.T) {
	for _, errno := range []unix.Errno{unix.ENOSYS, unix.EPERM} {
		lockThread(t)
		fake := &refusingSetup{errno: errno}
		r, err := newRing(Config{Entries: 8, Logger: quietLogger()}, fake.setup)
		if err != nil {
			t.Fatalf("%v: auto: %v", errno, err)
		}
		info := r.Info()
		if info.Backend != BackendFallback || !strings.Contains(info.FallbackReason, errno.Error()) {
			t.Fatalf("%v: backend %q reason %q", errno, info.Backend, info.FallbackReason)
		}
		if len(fake.asked) != 1 {
			t.Fatalf("%v: tried %d flag sets; no flag set helps against it", errno, len(fake.asked))
		}
		r.Close()
		_, err = newRing(Config{Backend: BackendIOUring, Entries: 8, Logger: quietLogger()}, fake.setup)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%v: io_uring demanded: %v, want ErrUnavailable", errno, err)
		}
	}
}
