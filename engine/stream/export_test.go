package stream

// InflightBytes is what the owner has in flight to follower node.
func (c *Copy) InflightBytes(node uint16) int {
	if i := c.followerIndex(node); i >= 0 {
		return c.followers[i].inflightBytes
	}
	return -1
}

// FollowerMatch is follower node's acknowledged tail as the owner knows it.
func (c *Copy) FollowerMatch(node uint16) uint64 {
	if i := c.followerIndex(node); i >= 0 {
		return c.followers[i].match
	}
	return 0
}

// ConfirmedTailOf exposes the confirm rule's arithmetic.
func ConfirmedTailOf(tails []uint64, w int) uint64 { return confirmedTail(tails, w) }

// BreakConfirmShort makes c confirm on one copy fewer than W (never below one): a broken variant
// the randomized test must catch.
func BreakConfirmShort(c *Copy) { c.w = max(c.w-1, 1) }

// BreakAckBeforeOwnerFsync makes c count its own appended tail, not its durable one, toward the
// confirm rule: it may answer a produce before its own fsync.
func BreakAckBeforeOwnerFsync(c *Copy) { c.broken.ackEarly = true }
