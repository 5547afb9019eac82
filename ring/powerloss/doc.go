// Package powerloss is the storage fault model for tests: a Ring decorator over real files that, on a
// simulated power loss, keeps what was synced and only a random, possibly torn, part of what was not.
//
// A Disk models one machine's disk under a root directory. Rings wrapped by Disk.Wrap run every
// operation on the real files as before, and the Disk records, per file, a durable image and the
// ordered list of unsynced writes and truncates, and per directory the unsynced namespace changes
// (create, mkdir, unlink, rename). Disk.PowerLoss, called once the wrapped rings are closed or
// abandoned, rewrites the files and directories under root to one state a power loss could leave,
// drawn from the Disk's seed, and returns a Report whose String is a one-line description that starts
// with the seed: a failing seed is a one-line repro. Disk.PowerLossCopy draws such a state into a copy
// of the tree instead, from a seed of its own, leaving the files and the model alone: one recorded run
// then yields thousands of power-loss states at the cost of copying small files, without repeating the
// workload and its fsyncs. Disk.Cut is the moment the power goes for a workload that cannot stop at
// once (a node whose shards are still running): afterwards nothing reaches the model and every sync
// completes with EIO, so nothing is acknowledged that the power loss undoes. Disk.Inject makes a chosen write, sync, truncate or read fail with EIO or ENOSPC
// without touching the file, for failed-persist tests; a fault with Until stays armed (a full file
// system) until Disk.Clear, and a Short one makes a write write half its bytes.
//
// The model:
//
//   - An fsync or fdatasync that succeeds makes durable every write, truncate or fallocate of that
//     file that completed before the sync completed and was queued before the sync was queued: a write
//     linked before the sync counts, an unlinked write queued after it does not.
//   - Disk.WritesInAnyOrder (opt-in, for layouts that claim to need no order among the writes one sync
//     covers): each power loss then draws whether files keep a prefix of their unsynced operations or
//     any subset of their unsynced writes, each whole, torn or lost alone (truncates and fallocates
//     still a prefix); Report.FileSubset says which.
//   - A namespace change (a file created by Openat with O_CREAT, MkdirAt, UnlinkAt, RenameAt) is
//     durable only once an fsync of its parent directory succeeds under the same rule.
//   - On PowerLoss each file becomes its durable image plus a random prefix of its unsynced operations,
//     the last kept write possibly torn (a random prefix of its bytes, at 512-byte sector or at byte
//     granularity, both drawn); each directory keeps part of its unsynced changes, so an unsynced new
//     file may vanish and an unsynced rename may be undone. Which part is drawn per power loss (its
//     Report's DirSubset): a random prefix of each directory's changes in completion order, or a
//     random subset of them, since file systems promise no order among unsynced entries of different
//     names. In both, a change never survives without the earlier unsynced changes it depends on:
//     the create or rename that made its name or a directory above it, the unlink or rename that
//     freed the name it takes, the unlinks that emptied a directory it removes.
//
// What it owns: the model (under a mutex, so several rings on several threads may share one Disk) and,
// during PowerLoss, the files and directories under root that the model knows about.
//
// Limits (outside the model): a write at offset -1 (the file position) is placed exactly on an
// O_APPEND file (at the modelled end of file) and elsewhere only while one such write per fd is in
// flight; files written or created by plain syscalls rather than through a wrapped
// ring (their state when the ring first touches them counts as durable); hard links and symlinks;
// mmap. Operations still in flight when PowerLoss runs count as never completed, which a power loss
// may indeed leave.
//
// Decisions where the design is silent:
//
//   - Files are identified by their inode (fstat of the fd at queue time), names by path: a write to
//     an fd opened with os.Open is modelled as well as one to an fd opened through the ring.
//   - A rename is a change of the destination's directory: an fsync of that directory makes it durable
//     (ext4 commits a rename in one journal transaction; the model asks for the destination's fsync).
//   - Fallocate with mode 0 extends the size like a truncate up; FALLOC_FL_KEEP_SIZE changes nothing
//     visible; FALLOC_FL_PUNCH_HOLE zeroes the range. fsync and fdatasync are treated alike.
//   - PowerLoss writes each surviving file as a new file renamed over the old name, so a kernel worker
//     finishing a write of an abandoned ring lands in an unlinked inode, not in the new state. Every fd
//     opened before PowerLoss must be closed and opened again, as after a reboot.
//   - After PowerLoss, what exists under root counts as durable again, as after NewDisk; the seeded
//     generator carries on, so a second PowerLoss draws new choices from the same seed.
//   - A change inside a directory changes that directory, whatever it is named: when the rename of
//     the directory (or of one above it) is lost, or not yet durable when the directory is fsynced,
//     the change lands under the old name. So a file unlinked from a renamed directory may be gone
//     from the directory under its old name (a delete that renames a tree away and empties it needs
//     the rename fsynced first).
//   - Dependencies between namespace changes are judged by the paths each change named when it ran;
//     a rename whose source is missing once the kept changes before it are applied is dropped too,
//     and so are the changes that depend on it.
//   - A sync applies the operations it covers to the durable image in the order they completed, and
//     leaves the ones it does not cover pending; a power loss applies a prefix of those after it. Two
//     overlapping writes in flight at once, one covered and one not, may thus land in an order the
//     disk would not have chosen: the model assumes callers do not race overlapping writes.
//   - An injected fault queues the same operation on fd -1 (so the kernel, or the fallback, fails it
//     and cancels what is linked after it, as a real EIO would) and reports the chosen errno instead.
package powerloss
