// Package controller holds the metadata of Keel's broker groups in a raft
// state machine (hashicorp/raft): the cluster identity, and per group its
// replicas, master, master epoch and in-sync set.
package controller
