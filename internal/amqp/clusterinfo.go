package amqp

// UnreachableGroups returns the other broker groups of the cluster that
// this door saw registered since it started and that have no master
// registered now, by name (forward_home.go; nil outside a cluster or when
// the cluster's members could never be asked). It may ask Config.Cluster
// (at most once per peersTTL, within forwardTimeout).
func (s *Server) UnreachableGroups() []string {
	if s.cfg.Cluster == nil {
		return nil
	}
	_, missing, err := s.clusterPeers()
	if err != nil {
		return nil
	}
	return missing
}
