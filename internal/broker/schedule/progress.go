package schedule

// Progress returns, per schedule queue (topic -> queue id -> queue offset),
// how far delivery is durable: every entry below the offset was delivered,
// the delivered copy was flushed and the cursor written. The broker reports
// it to the store's disk-pressure retention, which otherwise keeps every
// scheduled entry as unconsumed. Safe to call from any goroutine.
func (s *Service) Progress() map[string]map[int32]int64 {
	out := make(map[string]map[int32]int64)
	for _, q := range s.queues {
		byID := out[q.key.topic]
		if byID == nil {
			byID = make(map[int32]int64)
			out[q.key.topic] = byID
		}
		byID[q.key.id] = q.durable.Load()
	}
	return out
}
