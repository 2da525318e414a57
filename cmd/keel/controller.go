package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
	"github.com/spf13/cobra"
)

// keel controller: one voter of the controller cluster that holds the
// broker groups' metadata (docs/replication.md, "Controller").
// keel controller status: what the leader holds.

// bootstrapFromConfig is --bootstrap given without a list: take the
// voters from controllerDLegerPeers.
const bootstrapFromConfig = "(controllerDLegerPeers)"

type controllerOptions struct {
	// dataDirFlag is the flag overriding controllerStorePath ("data-dir",
	// or "controller-data-dir" under keel namesrv).
	dataDirFlag  string
	configFile   string
	strictConfig bool
	logLevel     string
	dataDir      string
	listen       string
	advertise    string
	nodeID       string
	bootstrap    string
	httpListen   string // keel controller only: /metrics and /healthz (empty: off)
}

func newControllerCmd() *cobra.Command {
	o := controllerOptions{dataDirFlag: "data-dir"}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run a controller node (raft voter holding the broker groups' masters, epochs and in-sync sets)",
		Long: `Run one voter of the controller cluster. Three voters (or five) hold, in a raft
log, the metadata of every broker group: its replicas, its master, the master
epoch and the in-sync set. The raft leader watches the brokers' heartbeats and,
when a master stays silent for controllerHeartBeatTimeoutMills, fences the live
in-sync replicas at the next epoch and elects the one with the longest log.

A new cluster is bootstrapped once, on one node, with the voter list:

  keel controller --data-dir d0 --controller-listen 127.0.0.1:9878 \
    --bootstrap=127.0.0.1:9878,127.0.0.1:9879,127.0.0.1:9880

The other voters start without --bootstrap and join when the first contacts
them. --bootstrap is refused when the data directory already holds state.
Brokers with enableControllerMode=true follow it (docs/replication.md,
"Controller"). --http-listen serves the voter's Prometheus /metrics.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && o.bootstrap == bootstrapFromConfig {
				return usageError{fmt.Errorf("give the voters as --bootstrap=LIST (with '='), not --bootstrap LIST")}
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.configFile, "config", "c", "", "controller.conf file (Java properties, RocketMQ's controller key names)")
	f.BoolVar(&o.strictConfig, "strict-config", false, "treat unknown controller.conf keys as errors")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&o.dataDir, "data-dir", config.DefaultController().StorePath, "data directory (overrides controllerStorePath)")
	f.StringVar(&o.listen, "controller-listen", config.DefaultControllerListen, "listen address for raft and the controller's requests (overrides controllerListen)")
	f.StringVar(&o.httpListen, "http-listen", "", "serve Prometheus /metrics and /healthz here (empty: no HTTP listener)")
	o.addIdentityFlags(cmd)
	cmd.AddCommand(newControllerStatusCmd(), newControllerSwitchOverCmd(), newControllerAllowUncleanCmd())
	return cmd
}

// addIdentityFlags adds the flags keel controller and keel namesrv share.
func (o *controllerOptions) addIdentityFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.advertise, "controller-advertise", "", "address the other voters, brokers and the CLI dial (overrides controllerAdvertise; default: the listen address)")
	f.StringVar(&o.nodeID, "node-id", "", "this voter's id in the voter list (overrides controllerDLegerSelfId; default: its address)")
	f.StringVar(&o.bootstrap, "bootstrap", "", "bootstrap a new controller cluster of these voters, id-host:port or host:port separated by ';' or ','\n(once, on one node; --bootstrap alone takes controllerDLegerPeers)")
	f.Lookup("bootstrap").NoOptDefVal = bootstrapFromConfig
}

// addEmbeddedFlags adds the flags of a controller embedded in keel namesrv
// (RocketMQ's enableControllerInNamesrv): on when --controller-listen is
// given.
func (o *controllerOptions) addEmbeddedFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.listen, "controller-listen", "", "also run a controller voter listening here (overrides controllerListen; empty: no controller)")
	f.StringVar(&o.dataDir, "controller-data-dir", config.DefaultController().StorePath, "the embedded controller's data directory (overrides controllerStorePath)")
	f.StringVar(&o.configFile, "controller-config", "", "controller.conf file of the embedded controller")
	o.addIdentityFlags(cmd)
}

// prepare loads the controller config and the bootstrap voters.
func (o *controllerOptions) prepare(cmd *cobra.Command, log *slog.Logger) (*config.Controller, []controller.Voter, error) {
	cc, err := o.loadController(cmd, log)
	if err != nil {
		return nil, nil, err
	}
	if o.bootstrap == "" {
		return cc, nil, nil
	}
	list := o.bootstrap
	if list == bootstrapFromConfig {
		if list = cc.Peers; list == "" {
			return nil, nil, usageError{fmt.Errorf("--bootstrap without a list needs controllerDLegerPeers in the controller.conf file (or use --bootstrap=VOTERS)")}
		}
	}
	voters, err := controller.ParseVoters(list)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--bootstrap: %w", err)}
	}
	return cc, voters, nil
}

// loadController reads the file, applies the flags given and validates.
func (o *controllerOptions) loadController(cmd *cobra.Command, log *slog.Logger) (*config.Controller, error) {
	c := config.DefaultController()
	if o.configFile != "" {
		var unknown []config.Unknown
		var err error
		if c, unknown, err = config.LoadController(o.configFile); err != nil {
			return nil, err
		}
		for _, u := range unknown {
			if o.strictConfig {
				return nil, fmt.Errorf("config: %s: %s (--strict-config)", o.configFile, u)
			}
			log.Warn("controller.conf key not supported; ignored", "file", o.configFile, "line", u.Line, "key", u.Key, "hint", u.Hint)
		}
	}
	for flag, key := range map[string]string{o.dataDirFlag: "controllerStorePath", "controller-listen": "controllerListen",
		"controller-advertise": "controllerAdvertise", "node-id": "controllerDLegerSelfId"} {
		if fl := cmd.Flags().Lookup(flag); fl != nil && fl.Changed {
			if err := c.Set(key, fl.Value.String()); err != nil {
				return nil, usageError{fmt.Errorf("--%s: %w", flag, err)}
			}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func runController(cmd *cobra.Command, o *controllerOptions) error {
	opts := options{logLevel: o.logLevel}
	log, err := opts.newLogger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	cc, voters, err := o.prepare(cmd, log)
	if err != nil {
		return err
	}
	ls, err := bindListeners(listenSpec{listenController, cc.Listen, controllerListenFlag},
		listenSpec{listenHTTP, o.httpListen, "--http-listen"})
	if err != nil {
		return err
	}
	defer ls.closeAll()
	p := &parts{log: log, listeners: ls}
	log.Info("keel controller", "version", version, "listen", cc.Listen, "data_dir", cc.StorePath)
	var node *controller.Controller
	return logStopped(log, runServices(cmd.Context(), log, p.controllerStarter(cc, voters, &node),
		p.controllerHTTPStarter(o.httpListen, &node)), false)
}

// controllerFlags are the flags of the commands that talk to a controller
// cluster.
type controllerFlags struct {
	addrs   string
	output  string
	timeout time.Duration
}

func (f *controllerFlags) add(cmd *cobra.Command, timeout time.Duration) {
	fl := cmd.Flags()
	fl.StringVar(&f.addrs, "controller-addr", "127.0.0.1"+config.DefaultControllerListen, "controller addresses host:port[;host:port] (RocketMQ's controllerAddr)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.timeout, "timeout", timeout, "how long to wait for an answer")
}

// client validates the flags and returns a client and a context bounded
// by --timeout; close and cancel them.
func (f *controllerFlags) client(cmd *cobra.Command) (*controller.Client, context.Context, context.CancelFunc, error) {
	if f.output != "table" && f.output != "json" {
		return nil, nil, nil, usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	var list []string
	for _, a := range strings.FieldsFunc(f.addrs, func(r rune) bool { return r == ';' || r == ',' }) {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return nil, nil, nil, usageError{fmt.Errorf("--controller-addr is empty")}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	return controller.NewClient(list), ctx, cancel, nil
}

// emit writes v as JSON with -o json, else table's output.
func (f *controllerFlags) emit(w io.Writer, v any, table func(io.Writer)) error {
	if f.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := newTable(w)
	table(tw)
	return tw.Flush()
}

func newControllerStatusCmd() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the controller cluster: leader, voters, and every group's master, epochs and in-sync set",
		Long: `Ask the controllers for the leader's view: the leader and its term, the
voters, and per broker group its master, master epoch, in-sync set and its
epoch, the replicas with their addresses and, as the leader sees them, the age
of each replica's last heartbeat and its log end; then the group's election
history (newest last). If no leader answers, a follower's view is shown and
says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, cancel, err := f.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer cl.Close()
			st, err := cl.Status(ctx)
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), st, func(w io.Writer) { controllerTable(w, st) })
		},
	}
	f.add(cmd, 5*time.Second)
	return cmd
}

func newControllerSwitchOverCmd() *cobra.Command {
	var f controllerFlags
	var group, note string
	var to uint32
	cmd := &cobra.Command{
		Use:   "switch-over",
		Short: "Move a group's master to an in-sync replica without losing an acknowledged message",
		Long: `Move a group's master to an in-sync replica: the leader fences the master at the
next epoch (it stops taking writes), waits until the replica's heartbeats show
it has the master's whole log, fences it, and elects it. If the replica does
not catch up within 5 s, the old master is elected again at the next epoch and
the command fails.

The brokers follow at once: the new master restarts its services as master at
the new epoch and registers with the NameServers as brokerId 0; the old master
restarts as its slave and stays in the in-sync set. Clients see the brokers'
ports close for a moment and reconnect; sends refused meanwhile are retried.
Nothing acknowledged is lost, in SYNC_MASTER and ASYNC_MASTER groups alike:
the new master holds the old one's whole log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, cancel, err := f.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer cl.Close()
			v, err := cl.SwitchOver(ctx, controller.SwitchOverRequest{Group: group, To: controller.ReplicaID(to), Note: note})
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), v, func(w io.Writer) { viewLine(w, v) })
		},
	}
	f.add(cmd, 15*time.Second)
	cmd.Flags().StringVar(&group, "group", "", "broker group (brokerName)")
	cmd.Flags().Uint32Var(&to, "to", 0, "replica id of the new master (see keel controller status)")
	cmd.Flags().StringVar(&note, "note", "", "why, kept in the group's history")
	cmd.MarkFlagRequired("group")
	cmd.MarkFlagRequired("to")
	return cmd
}

func newControllerAllowUncleanCmd() *cobra.Command {
	var f controllerFlags
	var group, note string
	var allow bool
	cmd := &cobra.Command{
		Use:   "allow-unclean",
		Short: "Allow (or forbid) electing a replica outside a group's in-sync set",
		Long: `Allow, or with --allow=false forbid again, an unclean election for one group:
when no in-sync replica answers, the leader then elects the live replica with
the longest log among the others. Such an election may lose acknowledged
messages. The change and every unclean election are kept in the group's
history.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, cancel, err := f.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer cl.Close()
			v, err := cl.SetAllowUnclean(ctx, controller.AllowUnclean{Group: group, Allow: allow, Note: note})
			if err != nil {
				return err
			}
			return f.emit(cmd.OutOrStdout(), v, func(w io.Writer) { viewLine(w, v) })
		},
	}
	f.add(cmd, 5*time.Second)
	cmd.Flags().StringVar(&group, "group", "", "broker group (brokerName)")
	cmd.Flags().BoolVar(&allow, "allow", true, "allow (true) or forbid (false)")
	cmd.Flags().StringVar(&note, "note", "", "why, kept in the group's history")
	cmd.MarkFlagRequired("group")
	return cmd
}

// viewLine is a group's view in one line.
func viewLine(w io.Writer, v controller.GroupView) {
	fmt.Fprintf(w, "group %s: master %s at %s, master epoch %d, in-sync %s (epoch %d)\n",
		v.Group, replicaName(v.MasterID), v.MasterAddr, v.MasterEpoch, members(v.InSync), v.InSyncEpoch)
}

// controllerTable writes the status for people.
func controllerTable(w io.Writer, st controller.Status) {
	whose := "leader"
	if !st.Acting {
		whose = "NOT the acting leader (" + st.State + "); no leader answered"
	}
	fmt.Fprintf(w, "controller %s (%s), view of %s: term %d, applied index %d, cluster %s\n", st.NodeID, st.Addr, whose, st.Term, st.AppliedIndex, st.ClusterID)
	leader := st.LeaderAddr
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "leader: %s\n", leader)
	row(w, "VOTER", "ADDRESS")
	for _, v := range st.Voters {
		row(w, v.ID, v.Addr)
	}
	live := map[controller.ReplicaID]controller.ReplicaLiveness{}
	for _, l := range st.Live {
		live[l.ID] = l
	}
	for _, g := range st.Groups {
		fmt.Fprintf(w, "\ngroup %s: master %s, master epoch %d, in-sync %s (epoch %d), unclean elections %s\n",
			g.Name, replicaName(g.MasterID), g.MasterEpoch, members(g.InSync), g.InSyncEpoch, onOff(g.AllowUnclean))
		if since, ok := st.WithoutMaster[g.Name]; ok {
			fmt.Fprintf(w, "  WITHOUT A MASTER since %s: no live in-sync replica answered\n", time.UnixMilli(since).UTC().Format(time.RFC3339))
		}
		row(w, "REPLICA", "ROLE", "ADDRESS", "HA_ADDRESS", "STORE", "HEARTBEAT_AGE", "LAST_EPOCH", "LOG_END")
		for _, r := range sortedReplicas(g) {
			role := "slave"
			if r.ID == g.MasterID {
				role = "master"
			}
			age, epoch, end := "-", "-", "-"
			if l, ok := live[r.ID]; ok && l.Incarnation == r.Incarnation {
				age = (time.Duration(l.AgeMillis) * time.Millisecond).String()
				epoch, end = fmt.Sprint(l.LastEpoch), fmt.Sprint(l.LogEnd)
			}
			row(w, r.ID, role, r.Addr, r.HAAddr, r.StoreUUID, age, epoch, end)
		}
		for _, e := range g.History {
			eventLine(w, e)
		}
	}
}

// eventLine writes one entry of a group's history, indented.
func eventLine(w io.Writer, e controller.Event) {
	fmt.Fprintf(w, "  %s %s epoch %d: %s -> %s%s\n", time.UnixMilli(e.TimeMillis).UTC().Format(time.RFC3339), e.Kind, e.Epoch,
		replicaName(e.OldMasterID), replicaName(e.MasterID), noteOf(e))
}

func sortedReplicas(g *controller.Group) []*controller.Replica {
	out := make([]*controller.Replica, 0, len(g.Replicas))
	for _, r := range g.Replicas {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *controller.Replica) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func replicaName(id controller.ReplicaID) string {
	if id == 0 {
		return "none"
	}
	return fmt.Sprintf("replica %d", id)
}

func members(ms []controller.Member) string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = fmt.Sprint(m.ID)
	}
	return "[" + strings.Join(ids, " ") + "]"
}

func onOff(b bool) string {
	if b {
		return "ALLOWED"
	}
	return "off"
}

func noteOf(e controller.Event) string {
	var parts []string
	if len(e.Fenced) > 0 {
		var f []string
		for _, x := range e.Fenced {
			f = append(f, fmt.Sprintf("%d@%d:%d", x.ID, x.LastEpoch, x.LogEnd))
		}
		parts = append(parts, "fenced "+strings.Join(f, " "))
	}
	if e.Note != "" {
		parts = append(parts, e.Note)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}
