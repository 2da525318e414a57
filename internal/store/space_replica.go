package store

import "github.com/keelmq/keel/internal/store/commitlog"

// A replica's writes are its master's records, appended by
// AppendReplicated. They are admitted against the measured free space as
// a master's puts are (admitWrite), so that a replica whose disk fills
// stops taking data while the reserve is still free: its log stays
// intact, dispatch and metadata keep their room, and the replica can say
// it is full (ReplicaSpace) instead of failing writes one by one.

// admitReplicated admits a replicated range of n bytes holding recs
// records (trailers included in n). appendMu is held.
func (s *Store) admitReplicated(n, recs int) error {
	if p := s.diskFullNow(); p != nil {
		return *p
	}
	return s.admitBytes(int64(commitlog.BlankBytes) + int64(n) + int64(recs)*derivedBytesPerRecord)
}

// ReplicaSpace returns nil while the store has room for replicated
// writes, and the disk-full error (wrapping ErrDiskFull) while its disk
// is above the hard limit (diskHardLimitRatio, or the reserve kept for
// dispatch and metadata): a replica does not follow its master then. The
// disk is measured again at most every 100 ms while it is full, so the
// answer turns nil soon after space returns.
func (s *Store) ReplicaSpace() error {
	if p := s.diskFullNow(); p != nil {
		return *p
	}
	return nil
}
