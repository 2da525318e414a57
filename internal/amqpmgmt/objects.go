package amqpmgmt

// The objects served, as RabbitMQ 3.10's management API names their
// fields. Only fields Keel knows the value of are present: no rates
// (rates_mode is "none"), no memory or Erlang process figures.

import (
	"slices"

	"github.com/keelmq/keel/internal/amqpinfo"
)

type object = map[string]any

// args returns arguments as served: an object, never null.
func args(a map[string]any) map[string]any {
	if a == nil {
		return map[string]any{}
	}
	return a
}

func (a *api) queueJSON(q nodeQueue) object {
	typ := q.Type
	if typ == "" {
		typ = "classic"
	}
	arguments := q.Arguments
	if !q.remote {
		arguments = a.cfg.Source.QueueArguments(q.Vhost, q.Name)
	}
	return object{
		"name": q.Name, "vhost": q.Vhost, "durable": q.Durable, "auto_delete": q.AutoDelete, "exclusive": q.Exclusive,
		"arguments": args(arguments), "node": q.node, "state": "running", "type": typ,
		"consumers": q.Consumers, "messages": q.Ready + q.Unacked, "messages_ready": q.Ready,
		"messages_unacknowledged": q.Unacked, "message_stats": object{"publish": q.Published, "deliver_get": q.Delivered,
			"redeliver": q.Redelivered, "ack": q.Acked},
	}
}

func (a *api) exchangeJSON(e amqpinfo.Exchange) object {
	return object{"name": e.Name, "vhost": e.Vhost, "type": e.Type, "durable": e.Durable, "auto_delete": e.AutoDelete,
		"internal": e.Internal, "arguments": args(a.cfg.Source.ExchangeArguments(e.Vhost, e.Name))}
}

// defaultExchange is the nameless direct exchange every vhost has.
func defaultExchange(vhost string) amqpinfo.Exchange {
	return amqpinfo.Exchange{Vhost: vhost, Name: "", Type: "direct", Durable: true}
}

func bindingJSON(b amqpinfo.Binding) object {
	return object{"source": b.Source, "vhost": b.Vhost, "destination": b.Destination, "destination_type": b.DestinationType,
		"routing_key": b.RoutingKey, "arguments": args(b.Arguments), "properties_key": propertiesKey(b)}
}

// propertiesKey names a binding among those of the same source and
// destination, as RabbitMQ's properties_key does: "~" for an empty
// routing key, the key (URL-escaped) without arguments; with arguments
// the key, "~" and a digest of them (RabbitMQ's digest differs: the
// value is only an identifier).
func propertiesKey(b amqpinfo.Binding) string {
	k := pathEscape(b.RoutingKey)
	if len(b.Arguments) == 0 {
		if k == "" {
			return "~"
		}
		return k
	}
	return k + "~" + argsDigest(b.Arguments)
}

func (a *api) connectionJSON(c amqpinfo.ConnectionDetail) object {
	props := c.ClientProperties
	if props == nil {
		props = map[string]any{}
	}
	o := object{
		"name": c.Name, "node": a.cfg.Node, "vhost": c.Vhost, "user": c.User, "user_who_performed_action": c.User,
		"auth_mechanism": c.AuthMechanism, "protocol": "AMQP 0-9-1", "type": "network", "state": "running",
		"host": c.Host, "port": c.Port, "peer_host": c.PeerHost, "peer_port": c.PeerPort, "ssl": c.TLS,
		"channels": c.Channels, "frame_max": c.FrameMax, "channel_max": c.ChannelMax, "timeout": c.HeartbeatSeconds,
		"connected_at": c.ConnectedAtMs, "client_properties": props,
	}
	if n, ok := props["connection_name"].(string); ok {
		o["user_provided_name"] = n // the name the client gave itself
	}
	return o
}

// channelName is RabbitMQ's name of a channel.
func channelName(conn string, number uint16) string {
	return conn + " (" + itoa(int(number)) + ")"
}

func (a *api) channelJSON(c amqpinfo.Channel) object {
	return object{
		"name": channelName(c.Connection, c.Number), "node": a.cfg.Node, "number": c.Number, "vhost": c.Vhost,
		"user": c.User, "user_who_performed_action": c.User, "state": "running",
		"consumer_count": c.Consumers, "messages_unacknowledged": c.Unacked, "prefetch_count": c.Prefetch,
		"global_prefetch_count": c.GlobalPrefetch, "connection_details": object{"name": c.Connection, "peer_host": c.PeerHost, "peer_port": c.PeerPort},
	}
}

func (a *api) consumerJSON(c amqpinfo.Consumer) object {
	return object{
		"consumer_tag": c.Tag, "queue": object{"name": c.Queue, "vhost": c.Vhost}, "ack_required": c.AckRequired,
		"prefetch_count": c.Prefetch,
		"channel_details": object{"name": channelName(c.Connection, c.Channel), "number": c.Channel,
			"connection_name": c.Connection, "peer_host": c.PeerHost, "peer_port": c.PeerPort, "user": c.User, "node": a.cfg.Node},
	}
}

// exchangeTypes are the exchange types served.
var exchangeTypes = []object{
	{"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
	{"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
	{"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
	{"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
}

func (a *api) overview(r request) (any, error) {
	src := a.cfg.Source
	qs, down := a.clusterQueues(r.Context(), r.user)
	var ready, unacked int64
	var pub, del, redel, acked uint64
	consumers := 0
	for _, q := range qs {
		ready, unacked, consumers = ready+q.Ready, unacked+q.Unacked, consumers+q.Consumers
		pub, del, redel, acked = pub+q.Published, del+q.Delivered, redel+q.Redelivered, acked+q.Acked
	}
	listeners := []object{}
	for _, l := range a.cfg.Listeners {
		host, port := splitAddr(l.Addr)
		listeners = append(listeners, object{"node": a.cfg.Node, "protocol": l.Protocol, "ip_address": host, "port": port})
	}
	o := object{
		"management_version": CompatVersion, "rabbitmq_version": CompatVersion, "product_name": "Keel",
		"product_version": a.cfg.Version, "cluster_name": a.cfg.Node, "node": a.cfg.Node, "rates_mode": "none",
		"disable_stats": false, "exchange_types": exchangeTypes, "listeners": listeners,
		"object_totals": object{"connections": len(src.ConnectionDetails()), "channels": len(src.Channels()),
			"consumers": consumers, "queues": len(qs), "exchanges": len(src.Exchanges()) + len(src.VhostNames())},
		"queue_totals":  object{"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked},
		"message_stats": object{"publish": pub, "deliver_get": del, "redeliver": redel, "ack": acked},
	}
	if a.cfg.Cluster != nil {
		o["unreachable_nodes"] = unreachable(down)
	}
	return one(r, o)
}

func (a *api) whoami(r request) (any, error) {
	return one(r, object{"name": r.user, "tags": []string{"administrator"}})
}

// vhost returns the path's vhost, "" for none; errNotFound if it is not
// served.
func (a *api) vhost(r request) (string, error) {
	v := r.arg(0)
	if v == "" {
		return "", nil
	}
	if !slices.Contains(a.cfg.Source.VhostNames(), v) {
		return "", errNotFound
	}
	return v, nil
}

func (a *api) vhosts(r request) (any, error) {
	only, err := a.vhost(r)
	if err != nil {
		return nil, err
	}
	type counts struct{ ready, unacked int64 }
	per := map[string]counts{}
	qs, _ := a.clusterQueues(r.Context(), r.user)
	for _, q := range qs {
		c := per[q.Vhost]
		per[q.Vhost] = counts{c.ready + q.Ready, c.unacked + q.Unacked}
	}
	var out []object
	for _, v := range a.cfg.Source.VhostNames() {
		if only != "" && v != only {
			continue
		}
		desc := ""
		if v == "/" {
			desc = "Default virtual host"
		}
		c := per[v]
		out = append(out, object{"name": v, "description": desc, "tags": []string{}, "tracing": false,
			"cluster_state": object{a.cfg.Node: "running"}, "messages": c.ready + c.unacked,
			"messages_ready": c.ready, "messages_unacknowledged": c.unacked})
	}
	if only != "" {
		return one(r, out[0])
	}
	return list(r, out)
}

func (a *api) queues(r request) (any, error) {
	vh, err := a.vhost(r)
	if err != nil {
		return nil, err
	}
	name, named := r.arg(1), r.arg(1) != ""
	var out []object
	qs, _ := a.clusterQueues(r.Context(), r.user)
	for _, q := range qs {
		if (vh == "" || q.Vhost == vh) && (!named || q.Name == name) {
			out = append(out, a.queueJSON(q))
		}
	}
	if named {
		if len(out) == 0 {
			return nil, errNotFound
		}
		return one(r, out[0])
	}
	return list(r, out)
}

func (a *api) exchanges(r request) (any, error) {
	vh, err := a.vhost(r)
	if err != nil {
		return nil, err
	}
	name, named := r.arg(1), r.arg(1) != ""
	if named && name == "amq.default" {
		name = "" // RabbitMQ's name of the default exchange in a path
	}
	var all []amqpinfo.Exchange
	for _, v := range a.cfg.Source.VhostNames() {
		all = append(all, defaultExchange(v))
	}
	all = append(all, a.cfg.Source.Exchanges()...)
	slices.SortStableFunc(all, func(x, y amqpinfo.Exchange) int {
		if x.Vhost != y.Vhost {
			return cmpStr(x.Vhost, y.Vhost)
		}
		return cmpStr(x.Name, y.Name)
	})
	var out []object
	for _, e := range all {
		if (vh == "" || e.Vhost == vh) && (!named || e.Name == name) {
			out = append(out, a.exchangeJSON(e))
		}
	}
	if named {
		if len(out) == 0 {
			return nil, errNotFound
		}
		return one(r, out[0])
	}
	return list(r, out)
}

// bindings lists, as RabbitMQ does, the default exchange's implicit
// binding to every queue (routing key: the queue's name) first in each
// vhost, then the bindings made.
func (a *api) bindings(r request) (any, error) {
	vh, err := a.vhost(r)
	if err != nil {
		return nil, err
	}
	byVhost := map[string][]object{}
	for _, q := range a.cfg.Source.Queues() {
		byVhost[q.Vhost] = append(byVhost[q.Vhost], bindingJSON(amqpinfo.Binding{Vhost: q.Vhost, Destination: q.Name,
			DestinationType: "queue", RoutingKey: q.Name}))
	}
	for _, b := range a.cfg.Source.Bindings() {
		byVhost[b.Vhost] = append(byVhost[b.Vhost], bindingJSON(b))
	}
	var out []object
	for _, v := range a.cfg.Source.VhostNames() {
		if vh == "" || v == vh {
			out = append(out, byVhost[v]...)
		}
	}
	return list(r, out)
}

func (a *api) connections(r request) (any, error) {
	name := r.arg(0)
	var out []object
	for _, c := range a.cfg.Source.ConnectionDetails() {
		if name == "" || c.Name == name {
			out = append(out, a.connectionJSON(c))
		}
	}
	if name != "" {
		if len(out) == 0 {
			return nil, errNotFound
		}
		return one(r, out[0])
	}
	return list(r, out)
}

func (a *api) channels(r request) (any, error) {
	name := r.arg(0)
	var out []object
	for _, c := range a.cfg.Source.Channels() {
		if name == "" || channelName(c.Connection, c.Number) == name {
			out = append(out, a.channelJSON(c))
		}
	}
	if name != "" {
		if len(out) == 0 {
			return nil, errNotFound
		}
		return one(r, out[0])
	}
	return list(r, out)
}

func (a *api) consumers(r request) (any, error) {
	vh, err := a.vhost(r)
	if err != nil {
		return nil, err
	}
	var out []object
	for _, c := range a.cfg.Source.Consumers() {
		if vh == "" || c.Vhost == vh {
			out = append(out, a.consumerJSON(c))
		}
	}
	return list(r, out)
}
