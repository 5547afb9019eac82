package wire

import (
	"errors"
	"fmt"
)

// The rules every value a client hands the cluster is checked against, one function per kind of input.
// wire's decoders, the node's metadata service (engine), the metadata state machine (engine/meta), the
// Go client (client) and the commands (cmd/ringstream) all call these, so a value one layer takes is
// taken by every layer, and a value one refuses is refused by all of them with the same text. A
// refusal is a *RuleError: it names the rule it broke and carries the ErrorCode a node answers it
// with. These functions never panic and never assert: their argument is input.

// Name alphabet. A stream or consumer name is what an operator types on a command line, reads in a log
// line and puts in an admin URL path: ASCII letters, digits, '.', '_' and '-' need no quoting in any of
// them. "." and ".." are refused because they mean something else in a path. (Kafka's topic alphabet; its
// 249-byte bound comes from file names built from the topic, which ringstream does not build: a stream's
// directory is named by its id and incarnation, so the bound is the wire's one-byte length, 255.)
const (
	// StreamNameRule is the rule for a stream name, as refusals, README and --help state it.
	StreamNameRule = "a stream name is 1 to 255 bytes of ASCII letters, digits, '.', '_' and '-', and not \".\" or \"..\""
	// ConsumerNameRule is the rule for a consumer (cursor) name: the stream name's alphabet.
	ConsumerNameRule = "a consumer name is 1 to 255 bytes of ASCII letters, digits, '.', '_' and '-', and not \".\" or \"..\""
	// CopiesRule is the rule for a stream's copy count E.
	CopiesRule = "a stream has 1 to 7 copies, and no more than the cluster has nodes"
	// PolicyRule is the rule for a confirm policy.
	PolicyRule = "a confirm policy is all (local_durable), majority (majority_durable) or count N (count_durable(N)) with 1 <= N <= copies"
	// CountRule is the rule for a count of records or of listed streams.
	CountRule = "a count is at least 1"
	// SizeRule is the rule for a byte size a request asks for or carries.
	SizeRule = "a size in bytes is at least 1"
	// NodeIDRule is the rule for a node id.
	NodeIDRule = "a node id is 1 to 65535"
	// FormatRule is the rule for a produced batch's record format (the stored batch header's version).
	FormatRule = "a record format is 1 (values only) or 2 (records with key, headers and timestamp)"
)

// Record formats a produce carries and the stored batch header's version names. The node stores and
// fetches both and never reads a payload; the format tells a reader how to decode it.
const (
	FormatValues  uint8 = 1 // each record a uvarint length and its bytes, compressed whole by the codec
	FormatRecords uint8 = 2 // an 8-byte base timestamp (not compressed), then Kafka v2 records compressed whole by the codec
	FormatMax           = FormatRecords
)

// CopiesMax is the most copies a stream may have (E), and the most members of an assignment.
const CopiesMax = 7

// ErrRule is the sentinel every *RuleError matches (besides ErrMalformed).
var ErrRule = errors.New("wire: value breaks a rule")

// RuleError is a value refused by one of the rules above. Code is the error code a node answers it
// with; Rule is the rule's constant text; Detail says what in the value broke it.
type RuleError struct {
	Code   ErrorCode
	Rule   string
	Detail string
}

func (e *RuleError) Error() string { return fmt.Sprintf("%s: %s", e.Detail, e.Rule) }

// Is matches ErrRule and ErrMalformed, so a decoder's refusal of a broken rule is still a malformed field.
func (e *RuleError) Is(target error) bool { return target == ErrRule || target == ErrMalformed }

// CodeOf is the error code a node answers err with: the code of the rule err broke, else
// CodeInvalidRequest.
func CodeOf(err error) ErrorCode {
	if re, ok := errors.AsType[*RuleError](err); ok {
		return re.Code
	}
	return CodeInvalidRequest
}

func ruleError(code ErrorCode, rule, format string, args ...any) *RuleError {
	return &RuleError{Code: code, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// ValidateStreamName checks a stream name against StreamNameRule.
func ValidateStreamName(name string) error {
	return validateName(name, "stream", CodeBadStreamName, StreamNameRule)
}

// ValidateConsumerName checks a consumer name against ConsumerNameRule.
func ValidateConsumerName(name string) error {
	return validateName(name, "consumer", CodeBadConsumerName, ConsumerNameRule)
}

// validStreamName and validConsumerName are the decoders' forms, on bytes that alias a frame.
func validStreamName(b []byte) bool   { return nameBreaks(b) < 0 && len(b) > 0 }
func validConsumerName(b []byte) bool { return validStreamName(b) }

func validateName[T string | []byte](name T, what string, code ErrorCode, rule string) error {
	switch {
	case len(name) == 0:
		return ruleError(code, rule, "empty %s name", what)
	case len(name) > NameSizeMax:
		return ruleError(code, rule, "%s name of %d bytes", what, len(name))
	case string(name) == "." || string(name) == "..":
		return ruleError(code, rule, "%s name %q", what, name)
	}
	if i := nameBreaks(name); i >= 0 {
		return ruleError(code, rule, "%s name %q has byte %#x at %d", what, name, name[i], i)
	}
	return nil
}

// nameBreaks is the index of the first byte of name outside the name alphabet, or -1 when there is
// none (and name is not too long, ".", or ".."): len(name) is returned for those.
func nameBreaks[T string | []byte](name T) int {
	if len(name) > NameSizeMax || string(name) == "." || string(name) == ".." {
		return len(name)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return i
		}
	}
	return -1
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ValidateCopies checks a stream's copy count E against CopiesRule for a cluster of nodes nodes (0:
// the cluster's size is not known here, so only 1..CopiesMax is checked).
func ValidateCopies(copies uint8, nodes int) error {
	switch {
	case copies == 0 || copies > CopiesMax:
		return ruleError(CodeBadCopies, CopiesRule, "%d copies", copies)
	case nodes > 0 && int(copies) > nodes:
		return ruleError(CodeBadCopies, CopiesRule, "%d copies on a cluster of %d nodes", copies, nodes)
	}
	return nil
}

// ValidatePolicy checks a confirm policy and its count against PolicyRule for a stream of copies copies
// (0: the copy count is not known here, so the count is checked against CopiesMax).
func ValidatePolicy(p ConfirmPolicy, count, copies uint8) error {
	if copies == 0 {
		copies = CopiesMax
	}
	switch {
	case !p.valid():
		return ruleError(CodeBadPolicy, PolicyRule, "unknown policy %d", p)
	case p == PolicyCount && count == 0:
		return ruleError(CodeBadPolicy, PolicyRule, "count policy without a count")
	case p != PolicyCount && count != 0:
		return ruleError(CodeBadPolicy, PolicyRule, "a count of %d with a policy that takes none", count)
	case count > copies:
		return ruleError(CodeBadPolicy, PolicyRule, "count %d above %d copies", count, copies)
	}
	return nil
}

// ValidateCount checks a count of records or streams (what names the field) against CountRule.
func ValidateCount(what string, n uint64) error {
	if n == 0 {
		return ruleError(CodeBadCount, CountRule, "%s 0", what)
	}
	return nil
}

// ValidateSize checks a byte size (what names the field) against SizeRule.
func ValidateSize(what string, n uint64) error {
	if n == 0 {
		return ruleError(CodeBadSize, SizeRule, "%s 0", what)
	}
	return nil
}

// Offsets have no rule of their own: every u64 is a well-formed offset, and whether one is below a
// stream's retained head or past its confirmed tail is the copy's answer against its state
// (engine/stream), not a property of the value.

// ValidateFormat checks a produced batch's record format against FormatRule. Format 0 is not passed
// here: a produce that leaves area byte 25 zero is read as format 1 (DecodeProduce).
func ValidateFormat(format uint8) error {
	if format == 0 || format > FormatMax {
		return ruleError(CodeBadFormat, FormatRule, "record format %d", format)
	}
	return nil
}

// ValidateNodeID checks a node id (what names its role) against NodeIDRule. A node id never reaches a
// client refusal, so its code is CodeInvalidRequest.
func ValidateNodeID(what string, id uint16) error {
	if id == 0 {
		return ruleError(CodeInvalidRequest, NodeIDRule, "%s node id 0", what)
	}
	return nil
}
