package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/controller"
	"github.com/spf13/cobra"
)

// keel cluster: every broker group registered with the NameServers, each
// member with its replication state (docs/replication.md, "Operations").

func newClusterCmd() *cobra.Command {
	f := &adminFlags{}
	var controllerAddrs string
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show every broker group and the replication state of each member",
		Long: `Show every broker group (brokerName) registered with the NameServers and, for
each member, its replication state as it reports it in its runtime info: role,
epoch, log end (written offset) and confirmed offset; for each slave, what its
master says of it (in sync or not, lag in bytes and in seconds, last
acknowledgement) and whether it follows the master now. The group line says
how many copies are in sync and, for a SYNC_MASTER, whether that is fewer
than minInSyncReplicas (then it refuses sends). A replica connected to the
master but not registered is listed under its replication address.

Lag in seconds is the age of the oldest record the replica has not
acknowledged. A broker outside a group shows "-" for the replication
columns. A broker that does not answer is shown with its error and makes the
command exit non-zero after the others are listed. A group whose master is
down (not registered, or not answering) says NO MASTER with since when its
slaves have not heard from it, and lists a master no longer registered as
unreachable; that too makes the command exit non-zero.

With --controller-addr (groups in controller mode), each group the
controllers hold also shows the controller's view: its master, master epoch,
in-sync set, whether it is without a master, and its last elections (keel
controller status has the whole history); a group the controllers hold that
no member registered with the NameServers is listed too. Controllers that do
not answer make the command exit non-zero.`,
		Args: cobra.NoArgs,
		RunE: adminRun(f, func(cmd *cobra.Command, _ []string, c *admin.Client) error {
			bgs, err := c.BrokerGroups(cmd.Context())
			if err != nil {
				return err
			}
			var failed int
			for _, g := range bgs {
				for _, m := range g.Members {
					if m.Err != "" {
						failed++
					}
				}
				if d := g.MasterDown; d != nil && !d.Registered {
					failed++ // the master does not answer either
				}
			}
			gs := make([]clusterGroup, len(bgs))
			for i, g := range bgs {
				gs[i].BrokerGroup = g
			}
			var ctlErr error
			if controllerAddrs != "" {
				if gs, ctlErr = withController(cmd.Context(), gs, controllerAddrs, f.timeout); ctlErr != nil {
					ctlErr = fmt.Errorf("controller: %w", ctlErr)
				}
			}
			err = f.emit(cmd.OutOrStdout(), gs, func(w *tabwriter.Writer) { clusterTable(w, gs, time.Now()) })
			switch {
			case err != nil:
			case ctlErr != nil:
				err = ctlErr
			case failed > 0:
				err = fmt.Errorf("%d broker(s) did not answer", failed)
			}
			return err
		}),
	}
	f.add(cmd)
	cmd.Flags().StringVar(&controllerAddrs, "controller-addr", "",
		"also ask these controllers host:port[;host:port] (RocketMQ's controllerAddr) for each group's master epoch and last elections")
	return cmd
}

// clusterTable writes, per group, a heading line and a row per member.
func clusterTable(w io.Writer, gs []clusterGroup, now time.Time) {
	for i, cg := range gs {
		if i > 0 {
			io.WriteString(w, "\n")
		}
		g := cg.BrokerGroup
		if len(g.Members) == 0 && g.MasterDown == nil && cg.Controller != nil {
			fmt.Fprintf(w, "%s: no member registered with the NameServers\n", g.Name)
			controllerLines(w, cg.Controller)
			continue
		}
		master, _ := g.Master()
		ms := master.Replication
		fmt.Fprintf(w, "%s (cluster %s): %s\n", g.Name, g.Cluster, groupSummary(g, ms, now))
		controllerLines(w, cg.Controller)
		row(w, "ID", "ROLE", "ADDRESS", "EPOCH", "LOG_END", "CONFIRMED", "IN_SYNC", "LAG_BYTES", "LAG", "LAST_ACK", "LINK")
		if d := g.MasterDown; d != nil && !d.Registered {
			addr := "(not registered)"
			if d.Address != "" {
				addr = d.Address + " (replication; not registered)"
			}
			row(w, 0, "MASTER", addr, "-", "-", "-", "-", "-", "-", "-", "unreachable "+sinceText(now, d.LastHeard))
		}
		for _, m := range g.Members {
			memberRow(w, m, ms != nil, now)
		}
		for _, r := range g.Unregistered {
			m := admin.GroupMember{Broker: admin.Broker{Name: g.Name, ID: r.BrokerID, Addr: r.Address + " (replication; not registered)"}, AsReplica: &r}
			memberRow(w, m, true, now)
		}
	}
}

// groupSummary is the group's heading: the master's role and in-sync count.
func groupSummary(g admin.BrokerGroup, ms *admin.ReplicationState, now time.Time) string {
	if d := g.MasterDown; d != nil {
		why := "not registered with the NameServers"
		if d.Registered {
			why = "not answering"
		}
		return fmt.Sprintf("NO MASTER: the master is %s, unreachable %s; no sends to this group, its slaves serve reads", why, sinceText(now, d.LastHeard))
	}
	switch {
	case ms == nil && len(g.Members) == 1:
		return "not replicated"
	case ms == nil:
		return "no master with replication state"
	}
	s := fmt.Sprintf("%s, %d of %d copies in sync", ms.Role, ms.InSyncReplicas, 1+len(ms.Replicas))
	if ms.Role == "SYNC_MASTER" {
		s += fmt.Sprintf(", minInSyncReplicas %d", ms.MinInSyncReplicas)
	}
	if ms.InSyncShort() {
		s += ": TOO FEW IN SYNC, sends are refused"
	}
	return s
}

// memberRow writes a member: its own state, and for a slave its master's
// view of it (replicated: the master reports replication state).
func memberRow(w io.Writer, m admin.GroupMember, replicated bool, now time.Time) {
	if m.Err != "" {
		row(w, m.ID, "?", m.Addr, "", "", "", "", "", "", "", "error: "+m.Err)
		return
	}
	s := m.Replication
	if s == nil && m.ID == 0 {
		row(w, m.ID, "-", m.Addr, "-", "-", "-", "-", "-", "-", "-", "-")
		return
	}
	role, epoch, end, confirmed, link := "SLAVE", "-", "-", "-", "-"
	if s != nil {
		role, epoch = s.Role, strconv.FormatUint(uint64(s.Epoch), 10)
		end, confirmed = strconv.FormatInt(s.WrittenOffset, 10), strconv.FormatInt(s.ConfirmedOffset, 10)
		if s.Role == "SLAVE" {
			link = "not connected"
			if s.Connected {
				link = "following " + s.MasterAddress
			}
			if !s.LastContact.IsZero() {
				link += ", heard " + agoText(now, s.LastContact)
			}
		}
	}
	inSync, lagBytes, lag, lastAck := "-", "-", "-", "-"
	if m.ID != 0 && replicated {
		inSync = "not connected"
		if r := m.AsReplica; r != nil {
			inSync, lagBytes = yesNo(r.InSync), strconv.FormatInt(r.LagBytes, 10)
			if r.LagSeconds >= 0 {
				lag = (time.Duration(r.LagSeconds*1000) * time.Millisecond).String()
			}
			if !r.LastAck.IsZero() {
				lastAck = agoText(now, r.LastAck)
			}
		}
	}
	row(w, m.ID, role, m.Addr, epoch, end, confirmed, inSync, lagBytes, lag, lastAck, link)
}

// sinceText says since when a master has been unreachable: the last
// contact its slaves had with it.
func sinceText(now, lastHeard time.Time) string {
	if lastHeard.IsZero() {
		return "(no slave heard it since it started)"
	}
	return "since " + fmtTime(lastHeard) + " (" + agoText(now, lastHeard) + ", its slaves' last contact)"
}

func agoText(now, t time.Time) string {
	return max(0, now.Sub(t)).Round(time.Millisecond).String() + " ago"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// clusterGroup is a group as keel cluster shows it: what the NameServers
// and the brokers say, and with --controller-addr what the controllers
// hold.
type clusterGroup struct {
	admin.BrokerGroup
	Controller *controllerGroup `json:"controller,omitempty"`
}

// controllerGroupElections is how many of a group's last elections keel
// cluster shows.
const controllerGroupElections = 3

// controllerGroup is the controllers' view of a group.
type controllerGroup struct {
	MasterID    controller.ReplicaID `json:"masterId"`
	MasterAddr  string               `json:"masterAddr,omitempty"`
	MasterEpoch uint32               `json:"masterEpoch"`
	InSync      []controller.Member  `json:"inSync"`
	InSyncEpoch uint32               `json:"inSyncEpoch"`
	// WithoutMasterSinceMillis: the acting leader found the group without
	// a live master and could not elect one, since then (Unix ms).
	WithoutMasterSinceMillis int64 `json:"withoutMasterSinceMillis,omitempty"`
	// Elections are the last elections and operator actions, oldest
	// first.
	Elections []controller.Event `json:"elections,omitempty"`
}

// withController adds the controllers' view to the groups, and the groups
// they hold that no member registered.
func withController(ctx context.Context, gs []clusterGroup, addrs string, timeout time.Duration) ([]clusterGroup, error) {
	var list []string
	for _, a := range strings.FieldsFunc(addrs, func(r rune) bool { return r == ';' || r == ',' }) {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return gs, usageError{fmt.Errorf("--controller-addr is empty")}
	}
	cl := controller.NewClient(list)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return gs, err
	}
	by := map[string]int{}
	for i, g := range gs {
		by[g.Name] = i
	}
	for _, g := range st.Groups {
		cg := &controllerGroup{MasterID: g.MasterID, MasterEpoch: g.MasterEpoch, InSync: g.InSync, InSyncEpoch: g.InSyncEpoch,
			WithoutMasterSinceMillis: st.WithoutMaster[g.Name]}
		if r := g.Replicas[g.MasterID]; r != nil {
			cg.MasterAddr = r.Addr
		}
		cg.Elections = g.History[max(0, len(g.History)-controllerGroupElections):]
		if i, ok := by[g.Name]; ok {
			gs[i].Controller = cg
		} else {
			gs = append(gs, clusterGroup{BrokerGroup: admin.BrokerGroup{Name: g.Name}, Controller: cg})
		}
	}
	slices.SortStableFunc(gs, func(a, b clusterGroup) int { return strings.Compare(a.Name, b.Name) })
	return gs, nil
}

// controllerLines writes the controllers' view of a group under its
// heading (nothing without one).
func controllerLines(w io.Writer, c *controllerGroup) {
	if c == nil {
		return
	}
	master := replicaName(c.MasterID)
	if c.MasterAddr != "" {
		master += " at " + c.MasterAddr
	}
	fmt.Fprintf(w, "  controller: master %s, master epoch %d, in-sync %s (epoch %d)\n", master, c.MasterEpoch, members(c.InSync), c.InSyncEpoch)
	if c.WithoutMasterSinceMillis != 0 {
		fmt.Fprintf(w, "  WITHOUT A MASTER since %s: no live in-sync replica answered\n", time.UnixMilli(c.WithoutMasterSinceMillis).UTC().Format(time.RFC3339))
	}
	for _, e := range c.Elections {
		eventLine(w, e)
	}
}
