package vfs

import (
	"maps"
	"math/rand/v2"
	"slices"
)

// Crash simulates a power loss: every file reverts to the contents and size
// covered by its last completed Sync, every directory to its entries as of
// its last SyncDir (entries never synced disappear, removed ones come back,
// renames revert), locks are released, and every handle opened before
// returns ErrCrashed.
func (fs *MemFS) Crash() { fs.CrashWith(nil) }

// CrashWith is Crash with torn writes: each file keeps a random prefix of its
// unsynced writes and truncations, applied in order, and the write after the
// prefix may survive cut at a random byte. A nil rng keeps no unsynced
// change (Crash). Files are visited in name order, so one seed gives one
// outcome.
func (fs *MemFS) CrashWith(rng *rand.Rand) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.gen++
	fs.locks = map[string]bool{}
	fs.root.restore(rng)
}

// CrashClone returns a new MemFS holding what Crash would leave, without
// changing fs. Handles on fs stay valid; the two filesystems share nothing
// mutable afterwards.
func (fs *MemFS) CrashClone() *MemFS { return fs.CrashCloneWith(nil) }

// CrashCloneWith is CrashClone with torn writes as in CrashWith.
func (fs *MemFS) CrashCloneWith(rng *rand.Rand) *MemFS {
	fs.mu.RLock()
	root := fs.root.cloneDurable(map[*memNode]*memNode{})
	c := &MemFS{root: root, capacity: fs.capacity, locks: map[string]bool{}, now: fs.now}
	fs.mu.RUnlock()
	root.restore(rng)
	return c
}

// CrashCloneWriteBack returns a new MemFS holding what a power loss leaves
// when the page cache had written back an arbitrary subset of the dirty
// pages, in no particular order: each file's unsynced changes are applied
// in full, then every page they changed keeps its new contents or its
// durable ones, each at random, and a file that grew has its new size or
// its durable one. Bytes no unsynced change touched never change. fs is left alone; files are
// visited in name order, so one seed gives one outcome.
func (fs *MemFS) CrashCloneWriteBack(rng *rand.Rand) *MemFS {
	fs.mu.RLock()
	root := fs.root.cloneDurable(map[*memNode]*memNode{})
	c := &MemFS{root: root, capacity: fs.capacity, locks: map[string]bool{}, now: fs.now}
	fs.mu.RUnlock()
	root.restoreWriteBack(rng)
	return c
}

// restoreWriteBack is restore with pages written back in any order (see
// CrashCloneWriteBack).
func (n *memNode) restoreWriteBack(rng *rand.Rand) {
	if n.isDir {
		n.children = maps.Clone(n.syncedChildren)
		for _, name := range slices.Sorted(maps.Keys(n.children)) {
			n.children[name].restoreWriteBack(rng)
		}
		return
	}
	log := n.log
	n.pages = maps.Clone(n.syncedPages)
	n.size = n.syncedSize
	clear(n.dirty)
	n.log = nil
	for _, op := range log {
		n.apply(op)
	}
	for _, idx := range slices.Sorted(maps.Keys(n.dirty)) {
		if rng.IntN(2) == 0 {
			continue // written back
		}
		if pg, ok := n.syncedPages[idx]; ok {
			n.pages[idx] = pg
		} else {
			delete(n.pages, idx)
		}
	}
	if n.size > n.syncedSize && rng.IntN(2) == 0 {
		n.truncate(n.syncedSize) // the new size did not reach the disk
	}
	n.sync() // what reached the disk is now its durable contents
}

// restore resets n and everything durably below it to the durable state.
// A node reachable under two names (see MemFS) is restored twice; the second
// time is a no-op because the first leaves no unsynced changes.
func (n *memNode) restore(rng *rand.Rand) {
	if n.isDir {
		n.children = maps.Clone(n.syncedChildren)
		for _, name := range slices.Sorted(maps.Keys(n.children)) {
			n.children[name].restore(rng)
		}
		return
	}
	log := n.log
	n.pages = maps.Clone(n.syncedPages)
	n.size = n.syncedSize
	clear(n.dirty)
	n.log = nil
	if rng == nil || len(log) == 0 {
		return
	}
	keep := rng.IntN(len(log) + 1)
	for _, op := range log[:keep] {
		n.apply(op)
	}
	if keep < len(log) && !log[keep].truncate {
		op := log[keep]
		op.data = op.data[:rng.IntN(len(op.data))]
		n.apply(op)
	}
	n.sync() // what reached the disk is now its durable contents
}

func (n *memNode) apply(op memOp) {
	switch {
	case op.truncate:
		n.truncate(op.off)
	case len(op.data) > 0:
		n.write(op.data, op.off)
	}
}

// cloneDurable copies the durable state of n, plus its unsynced log so that a
// torn restore can replay it. Log data is never modified, so it is shared.
func (n *memNode) cloneDurable(seen map[*memNode]*memNode) *memNode {
	if c, ok := seen[n]; ok {
		return c
	}
	c := &memNode{isDir: n.isDir, modTime: n.modTime}
	seen[n] = c
	if n.isDir {
		c.syncedChildren = make(map[string]*memNode, len(n.syncedChildren))
		for name, child := range n.syncedChildren {
			c.syncedChildren[name] = child.cloneDurable(seen)
		}
		return c
	}
	c.syncedSize = n.syncedSize
	c.syncedPages = maps.Clone(n.syncedPages)
	c.dirty = map[int64]struct{}{}
	c.log = slices.Clone(n.log)
	return c
}
