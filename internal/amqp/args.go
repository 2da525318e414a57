package amqp

import (
	"fmt"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// Queue arguments acted on (queue.declare's x- arguments; anything else is
// kept and compared on a redeclare, and otherwise ignored, as RabbitMQ
// ignores arguments it does not know):
//
//	x-message-ttl              ms a message may wait in the queue (>= 0)
//	x-dead-letter-exchange     where expired, rejected, dropped and over-delivered messages go
//	x-dead-letter-routing-key  their routing key there (default: the message's own)
//	x-max-length               ready messages the queue holds (>= 0)
//	x-overflow                 drop-head (default) or reject-publish
//	x-delivery-limit           returns (requeues) before a message is dead-lettered (>= 0)
//	x-expires                  ms a queue may go unused (no consumer, no basic.get, no redeclare) before it is deleted (> 0)
//	x-queue-type               classic or quorum: both are the same fsynced queue; stream (stream.go)
type queueArgs struct {
	ttl           int64 // ms; -1: none
	dlx           string
	hasDLX        bool
	dlrk          string
	hasDLRK       bool
	maxLen        int64 // -1: none
	rejectPublish bool  // x-overflow=reject-publish
	deliveryLimit int64 // -1: none
	expires       int64 // ms a queue may stay unused before it is deleted (x-expires, > 0); -1: never
	queueType     string
	stream        streamArgs // x-queue-type=stream (stream.go)
}

// parseQueueArgs validates a declare's arguments; the error text says
// which argument is wrong (RabbitMQ answers 406 PRECONDITION_FAILED).
func parseQueueArgs(t wire.Table) (queueArgs, error) {
	a := queueArgs{ttl: -1, maxLen: -1, deliveryLimit: -1, expires: -1, queueType: "classic"}
	var err error
	if a.ttl, err = nonNegative(t, "x-message-ttl"); err != nil {
		return a, err
	}
	if a.maxLen, err = nonNegative(t, "x-max-length"); err != nil {
		return a, err
	}
	if a.deliveryLimit, err = nonNegative(t, "x-delivery-limit"); err != nil {
		return a, err
	}
	if a.expires, err = nonNegative(t, "x-expires"); err != nil {
		return a, err
	}
	if a.expires == 0 {
		return a, fmt.Errorf("invalid arg 'x-expires': 0 (it must be > 0 ms)")
	}
	if a.dlx, a.hasDLX, err = stringArg(t, "x-dead-letter-exchange"); err != nil {
		return a, err
	}
	if a.dlrk, a.hasDLRK, err = stringArg(t, "x-dead-letter-routing-key"); err != nil {
		return a, err
	}
	if a.hasDLRK && !a.hasDLX {
		return a, fmt.Errorf("invalid arg 'x-dead-letter-routing-key': x-dead-letter-exchange is not set")
	}
	overflow, ok, err := stringArg(t, "x-overflow")
	if err != nil {
		return a, err
	}
	switch {
	case !ok, overflow == "drop-head":
	case overflow == "reject-publish":
		a.rejectPublish = true
	default:
		return a, fmt.Errorf("invalid arg 'x-overflow': %q (Keel serves drop-head and reject-publish)", overflow)
	}
	qt, ok, err := stringArg(t, "x-queue-type")
	if err != nil {
		return a, err
	}
	if ok {
		switch qt {
		case "classic", "quorum":
			a.queueType = qt
		case "stream": // only its own arguments, over every other one's default (stream.go)
			sa, err := parseStreamArgs(t)
			a, _ = parseQueueArgs(nil)
			a.queueType, a.stream = qt, sa
			return a, err
		default:
			return a, fmt.Errorf("invalid arg 'x-queue-type': %q (Keel serves classic, quorum and stream queues)", qt)
		}
	}
	for _, k := range []string{"x-max-length-bytes", "x-max-priority", "x-single-active-consumer", "x-queue-mode"} {
		if _, ok := t[k]; ok {
			return a, fmt.Errorf("argument '%s' is not supported by Keel", k)
		}
	}
	return a, nil
}

// nonNegative reads an integer argument; -1 when absent.
func nonNegative(t wire.Table, k string) (int64, error) {
	v, ok := t[k]
	if !ok {
		return -1, nil
	}
	var n int64
	switch v := v.(type) {
	case int8:
		n = int64(v)
	case uint8:
		n = int64(v)
	case int16:
		n = int64(v)
	case uint16:
		n = int64(v)
	case int32:
		n = int64(v)
	case uint32:
		n = int64(v)
	case int64:
		n = v
	case int:
		n = int64(v)
	default:
		return 0, fmt.Errorf("invalid arg '%s': %v is not an integer", k, tableString(v))
	}
	if n < 0 {
		return 0, fmt.Errorf("invalid arg '%s': %d is negative", k, n)
	}
	return n, nil
}

func stringArg(t wire.Table, k string) (string, bool, error) {
	v, ok := t[k]
	if !ok {
		return "", false, nil
	}
	switch v := v.(type) {
	case []byte:
		return string(v), true, nil
	case string:
		return v, true, nil
	}
	return "", false, fmt.Errorf("invalid arg '%s': %v is not a string", k, tableString(v))
}
