// Package amqpmgmt serves the subset of RabbitMQ's management
// HTTP API that monitoring and tools read (rabbitmqadmin's list and show
// commands, dashboards polling queue depths), over snapshots of the AMQP
// door:
//
//	GET /api/overview
//	GET /api/whoami
//	GET /api/vhosts                 /api/vhosts/{vhost}
//	GET /api/queues                 /api/queues/{vhost}      /api/queues/{vhost}/{name}
//	GET /api/exchanges              /api/exchanges/{vhost}   /api/exchanges/{vhost}/{name}
//	GET /api/bindings               /api/bindings/{vhost}
//	GET /api/connections            /api/connections/{name}
//	DELETE /api/connections/{name}  (closes it: 320 CONNECTION_FORCED, reason X-Reason)
//	GET /api/channels               /api/channels/{name}
//	GET /api/consumers              /api/consumers/{vhost}
//	GET /api/nodes                  /api/nodes/{name}
//
// with RabbitMQ 3.10's JSON field names and shapes for the fields served
// (the list is in docs/amqp.md) and its list query parameters: columns,
// sort, sort_reverse, name with use_regex, page and page_size. A vhost in
// a path is URL-encoded ("/" is %2F). Every request needs HTTP Basic
// credentials that Config.Login accepts (401 with a JSON error
// otherwise); the API changes nothing but the connections an operator
// closes: any other method or DELETE is answered 405 with a JSON error. It knows no AMQP internals: the data
// comes through Source, as plain amqpinfo values, and, in a cluster of
// broker groups, the other groups' queues through Config.Cluster
// (cluster.go; cmd/keel/wire_amqp_listing.go asks each other master's
// LIST_AMQP): each queue's node is the group that stores it. It runs on a
// listener of its own (amqpManagementListen, off by default), wired by
// cmd/keel/wire_amqpmgmt.go.
//
// Concurrency: the handler is safe for concurrent use; every request
// takes fresh snapshots.
package amqpmgmt
