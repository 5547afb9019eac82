package streamhost

import "github.com/ringstream/ringstream/shard"

// TailEntries is the size of shard s's published-tails table (one entry per copy on it).
func (h *Host) TailEntries(s *shard.Shard) int { return len(h.shards[s.Index()].tails) }
