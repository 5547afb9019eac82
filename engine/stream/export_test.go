package stream

// CheckInvariants runs the copy's whole-state checks (tests only).
func (c *Copy) CheckInvariants() { c.checkInvariants() }

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
