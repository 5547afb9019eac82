// Package assert holds the one helper that turns a broken invariant into a crash.
//
// Assertions catch programmer errors: a state the code promises can never happen. They stay on in
// production, because continuing past a broken invariant in a storage engine turns a bug into lost data.
// Bytes from a socket or a disk are input, never asserted: decoders return errors for them.
package assert

// True panics with msg when cond is false. msg is a constant, package-prefixed text
// ("vsr: commit went backwards") so a crash names the invariant without formatting cost.
func True(cond bool, msg string) {
	if !cond {
		panic(msg)
	}
}
