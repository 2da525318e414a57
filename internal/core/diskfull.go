package core

// Reads on a full disk. The first pull or heartbeat of a new consumer group
// auto-creates the group, which writes config/subscriptionGroup.json; a
// heartbeat also creates the group's retry topic (config/topics.json). A
// read must not fail because such a write found the disk full. So:
//   - a group whose creation could not be written for lack of space is
//     served from memory with the default configuration, and written by a
//     retry at every offset flush (SaveUnsavedGroups, which the front door
//     calls every OffsetFlushInterval) until it is on disk (an auto-created
//     group holds only defaults: if the broker stops first, the next pull
//     creates the same group again);
//   - a retry topic that could not be created for lack of space is left to
//     a later heartbeat (every 30 s); until then the group has no retry
//     topic, and send-back could not have stored a message anyway.
// The store keeps a reserve of free space for this metadata (writes are
// refused before it is used, see store/space.go), so these paths matter
// when something else filled the disk.

import (
	"errors"
	"sync"
	"syscall"
)

// unsavedGroups holds auto-created groups not yet on disk.
type unsavedGroups struct {
	mu sync.Mutex
	m  map[string]GroupConfig // guarded by mu
}

// IsNoSpace reports whether err says the disk (or the quota) is full.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (u *unsavedGroups) get(name string) (GroupConfig, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	g, ok := u.m[name]
	return g, ok
}

// keepUnsavedGroup handles the failed creation of group name: for lack of
// space (and below MaxGroups) it keeps g in memory and returns it; any
// other error is returned.
func (b *Broker) keepUnsavedGroup(name string, g GroupConfig, err error) (GroupConfig, error) {
	if !IsNoSpace(err) {
		return GroupConfig{}, err
	}
	u := &b.unsaved
	u.mu.Lock()
	defer u.mu.Unlock()
	if old, ok := u.m[name]; ok {
		return old, nil
	}
	if len(u.m) >= b.cfg.MaxGroups {
		return GroupConfig{}, err
	}
	if u.m == nil {
		u.m = make(map[string]GroupConfig)
	}
	u.m[name] = g
	b.log.Warn("subscription group created in memory only: disk full; saving it is retried",
		"group", name, "err", err)
	return g, nil
}

// SaveUnsavedGroups writes the groups kept in memory; those still failing
// stay for the next round.
func (b *Broker) SaveUnsavedGroups() {
	u := &b.unsaved
	u.mu.Lock()
	pending := make(map[string]GroupConfig, len(u.m))
	for name, g := range u.m {
		pending[name] = g
	}
	u.mu.Unlock()
	for name, g := range pending {
		if _, _, err := b.groups.createIfAbsent(name, g); err != nil {
			if !IsNoSpace(err) {
				b.log.Error("saving subscription group failed", "group", name, "err", err)
			}
			continue
		}
		u.mu.Lock()
		delete(u.m, name)
		u.mu.Unlock()
		b.log.Info("subscription group saved after the disk was full", "group", name)
	}
}
