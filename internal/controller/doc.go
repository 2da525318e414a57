// Package controller is Keel's controller: three (or five) voters of a
// hashicorp/raft cluster that hold the metadata of the broker groups, and
// whose leader elects a new master, with fencing, when a master stops.
//
// # What it owns
//
// The raft state machine (FSM, State) holds only group metadata: the
// cluster id (a UUID fixed at bootstrap) and, per broker group
// (brokerName), its replicas (a permanent ReplicaID per store UUID, with
// the broker's remoting, HA and AMQP addresses and its current
// incarnation),
// the master, the master epoch, the in-sync set (replica id and
// incarnation) and its epoch, whether unclean elections are allowed, and
// a bounded history of elections and operator actions. Liveness
// (heartbeats, reported log ends) is soft state on the raft leader only
// and never logged. The NameServer keeps topic routes and broker
// registration; the store's system records keep topics, groups and
// offsets.
//
// # Commands
//
// Every change is a Command applied through raft, each a compare-and-set
// that Apply checks against the state (commands.go, fsm.go):
//
//	InitCluster{clusterId}                     once; the same id again is a no-op
//	RegisterReplica{cluster, group, store, id} id given once per store; re-registration
//	                                           keeps it and records addresses and incarnation
//	ElectMaster{group, expectEpoch, newMaster, kind, fenced}
//	                                           masterEpoch == expectEpoch; newMaster in the
//	                                           in-sync set (any replica for the first
//	                                           election; unclean: any, audited)
//	AlterInSync{group, master, incarnation, masterEpoch, expectInSyncEpoch, inSync}
//	                                           from the master at its epoch and incarnation;
//	                                           added members at their registered incarnation
//	AllowUnclean{group, allow, note}           operator switch, audited in the history
//
// Apply reads nothing but the state and the command: timestamps travel in
// the command (TimeMillis), slices are kept sorted, the JSON encoding of
// maps is sorted by key; a test applies a random log twice (once through a
// snapshot) and compares the snapshots byte for byte. Every command's
// fields are bounded (MaxNameBytes, MaxReplicasPerGroup) before it is
// proposed and again in Apply; Restore checks a snapshot's structure
// before it replaces the state. A command re-sent
// after an ambiguous raft error either finds the state it asked for (and
// succeeds without a second effect) or is rejected; rejections are typed
// (ErrStaleEpoch, ErrNotMaster, ...; errors.Is also works on the client
// side of the wire).
//
// # A node
//
// DataDir holds LOCK (flock: one process per directory), raft.db (the raft
// log and stable store, raft-boltdb/v2), snapshots/ (raft's
// FileSnapshotStore, two kept) and cluster-id (written durably).
// Bootstrapping is explicit: Config.Bootstrap (keel controller
// --bootstrap) on one node with the voter list, refused when the
// directory holds any state or a cluster id; the other voters start empty
// and adopt the cluster id of the first raft peer that contacts them.
//
// One port serves raft and the remoting RPCs (mux.go). A raft connection
// opens with 0xCE | len(1) | cluster id; the acceptor answers 0x01, or
// 0x02 and closes when the id is not its own, so two clusters (a second
// bootstrap, a voter list naming the wrong hosts) never exchange raft
// traffic. Anything else is a remoting connection (its first byte, the top
// byte of a frame length below 16 MiB, is 0; frames are bounded by
// MaxFrameBytes).
//
// The leader (leader.go) tracks leadership with a non-blocking raft
// Observer and State; on winning it runs a Barrier (its FSM then holds
// every earlier entry), writes or checks the cluster id, starts an empty
// soft state, and elects nothing for a full detection period (Config
// DetectionPeriod, D), so that every live broker has found it and
// heartbeated. It then scans every ScanInterval (Clock time: tests drive
// a manual clock). A group needs an election when its master has not
// heartbeated for D at the incarnation it was elected at (a restarted
// master never keeps its role by itself: it is elected again, at a new
// epoch, if it has the longest log). The election:
//
//  1. candidates: the in-sync members that heartbeated within D at their
//     registered incarnation (a registration counts as a heartbeat; before
//     a group's first election: every replica, once the group has been
//     known to this leader for D);
//  2. fence every candidate in parallel at epoch = masterEpoch+1
//     (FenceTimeout); an answer counts only if it names the replica, its
//     registered incarnation and exactly that epoch;
//  3. no answer and unclean allowed (Config.AllowUnclean or the group's
//     AllowUnclean): the same with the replicas outside the in-sync set,
//     committed as kind "unclean" and logged as an error;
//  4. pick the highest (lastEpoch, logEnd) of the answers, then the lowest
//     id; commit ElectMaster (expectEpoch = the epoch read);
//  5. the new in-sync set is the old one without the old master (its other
//     members hold every acknowledged write; the new master removes those
//     that do not follow it), in-sync epoch + 1; notify every replica
//     (Config.NotifyRoleChange) — brokers also learn it from heartbeats
//     and GetGroup polls. A failed attempt (no answer, no commit) is
//     retried after FenceTimeout.
//
// Why a fenced election loses nothing acknowledged: a SYNC_MASTER
// acknowledges a write only once every member of the in-sync set has it
// (the broker's rule, with the union of the current and a pending set
// while an AlterInSync is in flight), so every in-sync candidate holds
// it; a fenced candidate refuses the old master, so from the fence on the
// old master cannot complete an acknowledgement; and the candidate with
// the newest epoch and longest log holds every record any other fenced
// candidate holds.
//
// # RPCs
//
// Over Keel's remoting protocol (rpc.go), private codes defined in
// remoting/codes.go, JSON bodies: ReqControllerRegister (RegisterRequest →
// RegisterResponse), ReqControllerHeartbeat (HeartbeatRequest → GroupView),
// ReqControllerAlterInSync (AlterInSync → GroupView), ReqControllerGetGroup
// (ext group → GroupView), ReqControllerAllowUnclean (AllowUnclean →
// GroupView), ReqControllerSwitchOver (SwitchOverRequest → GroupView, the
// graceful switch-over of switchover.go), ReqControllerStatus (→ Status,
// any node). A node that is not
// the acting leader answers ResControllerNotLeader with ext leaderAddr; a
// rejection is ResControllerRejected with ext reason. Client finds the
// leader and follows those answers. The leader calls brokers through the
// Brokers interface: RemotingBrokers sends ReqControllerFence
// (FenceRequest → FenceResponse) and ReqControllerRoleChanged (GroupView)
// to a replica's registered remoting address; ServeBroker decodes both on
// the broker's side.
//
// # What the broker side must do
//
// Agent (agent.go) is the part of the broker's side that does not touch
// the data path, tested against a three-node cluster over remoting: it
// keeps the identity (store UUID, cluster id, replica id, promised epoch)
// in the store directory (AgentFile, written durably), registers,
// heartbeats, answers fences (ServeBroker routes them to it) and hands
// newer views to OnView. keel broker with enableControllerMode=true runs
// it (cmd/keel/controlled.go): the replication layer supplies Log and
// Fence (replication.Slave.Fence, replication.Master.Fence), OnView
// restarts the broker's services in the new role, and the master
// proposes the in-sync set (Agent.AlterInSync, confirmations waiting for
// the union meanwhile: replication.Master.SetRequired). The rules a
// broker in controller mode follows:
//
//  1. Keep in its store directory, durably, a store UUID (made with the
//     store; a store rebuilt from nothing gets a new one), and after its
//     first registration the cluster id and the replica id the answer gave.
//     Draw a random 64-bit incarnation at every process start.
//  2. Start fenced: no writes, no acknowledgements, no master role, no
//     brokerId 0 registration, until a view from the controller gives it
//     its role.
//  3. Register (Client.Register) with its group (brokerName), store UUID,
//     kept replica id (0 the first time), remoting, HA and AMQP addresses and
//     incarnation; keep the answer's cluster id and replica id durably
//     before acting on it. ErrClusterMismatch or ErrReplicaIDMismatch:
//     refuse to start (wrong controller cluster, or a copied store).
//  4. Heartbeat (Client.Heartbeat) every second with its incarnation, the
//     newest epoch of its epoch history (LastEpoch), its written log end
//     (LogEnd) and the highest epoch it promised in a fence (FencedEpoch: a
//     master fenced above its epoch is replaced, so a fence whose election
//     never committed does not leave the group without writes). ErrUnknownReplica or ErrStaleIncarnation: register
//     again. While no controller answers, keep its role (a SYNC_MASTER
//     with an in-sync set of two or more keeps writing: fencing alone
//     makes that safe).
//  5. Act on a view (heartbeat answer, RoleChanged, GetGroup polled every
//     few seconds) only when its MasterEpoch is above the epoch it acts
//     at. MasterID is itself: promote — cut a torn tail, append (MasterEpoch,
//     logEnd) to the epoch history durably before the first write,
//     recompute every queue's next offset from the log (never from the
//     ConsumeQueue), register with the NameServers as brokerId 0 with the
//     epoch as stateVersion, take writes. Otherwise: follow MasterHAAddr
//     as a slave at MasterEpoch (divergence, durable truncation, catch-up
//     as replication does today).
//  6. Serve ReqControllerFence (ServeBroker): a request below the epoch it
//     promised is refused (ErrFenced); otherwise persist the promised epoch
//     (fsync) before answering, then never again accept DATA from, or
//     acknowledge to, a master of a lower epoch (close such a session); a
//     master below the epoch stops taking writes at once and answers its
//     waiting sends without SEND_OK. Answer its replica id, incarnation,
//     the promised epoch, and LastEpoch and LogEnd read after the fence took
//     effect (nothing is appended after that point at an older epoch).
//  7. As master, propose AlterInSync, and only it: remove a slave whose
//     session ended or that lags (until the removal commits, acknowledge
//     with the union of both sets); add a slave of the current incarnation
//     whose written end is at least the confirmed offset and the current
//     epoch's start. Re-send after an ambiguous error with the same
//     ExpectInSyncEpoch; on ErrStaleInSyncEpoch read the group again; on
//     ErrNotMaster stop acting as master.
//  8. An ASYNC_MASTER acknowledges without its slaves, so fencing them
//     does not stop it: it asks for a lease in every heartbeat
//     (HeartbeatRequest.LeaseEpoch, lease.go), measures a grant
//     (GroupView.LeaseMillis) on its monotonic clock from when it sent
//     that heartbeat, heartbeats at least every third of the lease, and
//     confirms nothing, and takes no write, while it holds none
//     (replication.MasterConfig.Leased). The leader grants one only to
//     the master at its epoch and incarnation, after VerifyLeader, never
//     while the group elects, and elects no successor before the lease it
//     recorded ended plus LeaseMargin; LeaseDuration plus its margin is
//     below the detection period, which a new leader waits. What such a
//     master acknowledged and no replica copied is lost on a failover:
//     rejoining as a slave it cuts it (replication.SlaveConfig.TruncateShown).
//
// # Figures
//
// Stats (stats.go) is a node's figures for the metrics (internal/metrics
// reads them; this package does not import Prometheus): raft state,
// voter, leader known, acting; the elections this node committed as
// leader by kind and the fence answers it received, counted in process
// memory since it started (a cluster's totals are the sums over the
// voters); per group the master epoch and, on the acting leader, since
// when the group has had no live master (its master's last heartbeat,
// or when the leader found it without one).
//
// # Concurrency
//
// raft calls FSM.Apply, Snapshot and Restore from one goroutine; readers
// take FSM.mu's read side and get copies. The leader's soft state is
// under leaderState.mu; each election runs on a goroutine of its own, at
// most one per group. Every method of Controller and Client is safe for
// concurrent use. Close is idempotent and waits for every goroutine.
package controller
