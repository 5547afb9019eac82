package vsr

// quorumOf is the majority of n replicas.
func quorumOf(n int) int { return n/2 + 1 }

// primaryIndex is the member index that leads view among n replicas.
func primaryIndex(view uint32, n int) uint8 { return uint8(view % uint32(n)) }

// quorumOp is the highest op that at least quorum of acked hold: the quorum-th largest value.
// acked is sorted in place (it holds at most MembersMax values).
func quorumOp(acked []uint64, quorum int) uint64 {
	for i := 1; i < len(acked); i++ {
		for j := i; j > 0 && acked[j] > acked[j-1]; j-- {
			acked[j], acked[j-1] = acked[j-1], acked[j]
		}
	}
	if quorum > len(acked) || quorum < 1 {
		return 0
	}
	return acked[quorum-1]
}

// members is a set of member indexes.
type members uint8

func (m members) has(i uint8) bool { return m&(1<<i) != 0 }
func (m *members) add(i uint8)     { *m |= 1 << i }
func (m members) count() int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}
