package segment

// Broken variants for the power-loss tests: each removes one durability step, and the power-loss
// test must catch it within its seeds.

// BreakGroupCommitSync makes the record log's group commit skip its fdatasync.
func (c *Copy) BreakGroupCommitSync() { c.records.broken.noDataSync = true }

// BreakRollDirSync makes a record log group commit that created a segment skip the directory fsync.
func (c *Copy) BreakRollDirSync() { c.records.broken.noRollDirFsync = true }
