package replication

// A replica whose disk fills (its store admits replicated ranges against
// the measured free space, store.AppendReplicated) stops following its
// master: the range is refused with nothing written, the connection ends
// (the master drops it from the in-sync set at once, so a SYNC_MASTER
// short of copies refuses sends instead of waiting for it), and the
// replica does not dial again until its store has room (ReplicaSpace).
// The state is logged once per episode and shown in State.DiskFull.

// waitForSpace records that the replica is not following because its disk
// is full (err), logging it once.
func (s *Slave) waitForSpace(err error) {
	if !s.diskFull.Swap(true) {
		s.log.Error("replication: not following the master: the disk is full; nothing more is taken until space returns",
			"master", s.MasterAddr(), "err", err)
		if s.cfg.OnLinkLost != nil {
			s.cfg.OnLinkLost()
		}
	}
}

// spaceBack ends a disk-full episode, logging it.
func (s *Slave) spaceBack() {
	if s.diskFull.Swap(false) {
		s.log.Info("replication: disk space is back; following the master again", "master", s.MasterAddr())
	}
}
