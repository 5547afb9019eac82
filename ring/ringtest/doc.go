// Package ringtest is test support for code that runs on a ring: it runs a test once per backend and
// builds rings for tests. The ring, segment, shard and engine tests use it, so every one of them runs on
// io_uring and on the fallback, and none of them loses its io_uring run without saying so.
//
// What it owns: nothing beyond the rings it builds for one test, which it closes when the test ends.
// It never toggles kernel settings (kernel.io_uring_disabled) and keeps no package-level state.
//
// Decisions where the design is silent:
//
//   - Whether io_uring can be used is found out by setting up a real ring (Available), once per
//     ForEachBackend call, never cached: a ring's setup costs about as much as one file open.
//   - Where io_uring is refused, its subtest is skipped and the reason (the kernel's errno, and the
//     io_uring_disabled sysctl when it is set) is the skip message. With RINGSTREAM_REQUIRE_IOURING=1
//     that skip is a failure instead; "0" or unset keeps the skip; any other value fails the test with
//     a message naming the variable, so a typo in CI is not a silent skip.
//   - Each subtest locks its goroutine to its OS thread before f runs and never unlocks it, so the
//     thread exits with the subtest: a ring lives on the thread that made it, as in the shard.
package ringtest
