package ring

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkRenameAt renames a file there and back, one rename per iteration: through the ring on each
// backend, and as unix.Renameat (the baseline), in the same run. It is the cost of recycling a retired
// segment under a new name, without the directory fsync that makes it durable.
func BenchmarkRenameAt(b *testing.B) {
	for _, be := range benchBackends() {
		b.Run("ring/"+be.name, func(b *testing.B) {
			r := benchRing(b, be.newRing, 64)
			f := benchFile(b)
			names := [2]string{f.Name(), f.Name() + ".spare"}
			h := &countHandler{}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := r.RenameAt(h, 1, unix.AT_FDCWD, names[i%2], unix.AT_FDCWD, names[(i+1)%2], 0, 0); err != nil {
					b.Fatal(err)
				}
				for want := i + 1; h.n < want; {
					if err := r.Wait(1); err != nil {
						b.Fatal(err)
					}
					r.Dispatch()
				}
			}
			b.StopTimer()
			if h.failed != 0 {
				b.Fatalf("%d renames failed", h.failed)
			}
		})
	}
	b.Run("baseline/unix.Renameat", func(b *testing.B) {
		f := benchFile(b)
		names := [2]string{f.Name(), filepath.Join(filepath.Dir(f.Name()), "spare")}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := unix.Renameat(unix.AT_FDCWD, names[i%2], unix.AT_FDCWD, names[(i+1)%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
