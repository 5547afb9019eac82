// Package assert holds the one helper that turns a broken invariant into a crash.
//
// Assertions catch programmer errors: a state the code promises can never happen. They stay on in
// production, because continuing past a broken invariant in a storage engine turns a bug into lost data.
//
// The rule: an assertion guards our own invariants, never input. Input is every byte a client, a peer,
// an HTTP request, a configuration file, a flag or a disk handed the process, and every value computed
// from those bytes before a check of its own has passed on it. Input is checked where it enters, and a
// value that breaks a rule is refused with an error naming the rule (wire/rules.go holds the rules of
// client values; decoders return errors for bad bytes; a metadata op is checked by meta.EncodeOp before
// it is proposed, and a committed op that cannot be applied is refused by a Result, the same on every
// replica). Only after that check is the value ours, and only then may an assertion stand on it. So
// an assertion may say "the encoder was handed a name the client already checked", never "the name off
// the socket is valid": if a crash needs only a hostile or damaged input, the check is missing, not the
// assertion.
package assert

// True panics with msg when cond is false. msg is a constant, package-prefixed text
// ("vsr: commit went backwards") so a crash names the invariant without formatting cost.
func True(cond bool, msg string) {
	if !cond {
		panic(msg)
	}
}
