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
//	x-max-length-bytes         bytes of message bodies ready in the queue (>= 0)
//	x-overflow                 drop-head (default), reject-publish or reject-publish-dlx (refused publishes dead-lettered)
//	x-delivery-limit           returns (requeues) before a message is dead-lettered (>= 0)
//	x-expires                  ms a queue may go unused (no consumer, no basic.get, no redeclare) before it is deleted (> 0)
//	x-queue-type               classic or quorum: both are the same fsynced queue; stream (stream.go)
//	x-max-priority             priority levels of a classic queue (0 to 255; 0: none)
//	x-single-active-consumer   true: one consumer at a time gets deliveries (the first registered)
type queueArgs struct {
	ttl           int64 // ms; -1: none
	dlx           string
	hasDLX        bool
	dlrk          string
	hasDLRK       bool
	maxLen        int64 // -1: none
	maxBytes      int64 // -1: none
	maxPriority   int   // x-max-priority (1 to 255); 0: none
	rejectPublish bool  // x-overflow=reject-publish or reject-publish-dlx
	rejectDLX     bool  // x-overflow=reject-publish-dlx
	deliveryLimit int64 // -1: none
	expires       int64 // ms a queue may stay unused before it is deleted (x-expires, > 0); -1: never
	queueType     string
	single        bool       // x-single-active-consumer
	stream        streamArgs // x-queue-type=stream (stream.go)
}

// parseQueueArgs validates a declare's arguments; the error text says
// which argument is wrong (RabbitMQ answers 406 PRECONDITION_FAILED).
func parseQueueArgs(t wire.Table) (queueArgs, error) {
	a := queueArgs{ttl: -1, maxLen: -1, maxBytes: -1, deliveryLimit: -1, expires: -1, queueType: "classic"}
	var err error
	if a.ttl, err = nonNegative(t, "x-message-ttl"); err != nil {
		return a, err
	}
	if a.maxLen, err = nonNegative(t, "x-max-length"); err != nil {
		return a, err
	}
	if a.maxBytes, err = nonNegative(t, "x-max-length-bytes"); err != nil {
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
	case overflow == "reject-publish-dlx":
		a.rejectPublish, a.rejectDLX = true, true
	default:
		return a, fmt.Errorf("invalid arg 'x-overflow': %q (drop-head, reject-publish or reject-publish-dlx)", overflow)
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
	mp, err := nonNegative(t, "x-max-priority")
	if err != nil {
		return a, err
	}
	if mp > maxPriority {
		return a, fmt.Errorf("invalid arg 'x-max-priority': %d is above the maximum %d", mp, maxPriority)
	}
	a.maxPriority = int(max(mp, 0))
	if v, ok := t["x-single-active-consumer"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return a, fmt.Errorf("invalid arg 'x-single-active-consumer': %v is not a boolean", tableString(v))
		}
		a.single = b
	}
	for _, k := range []string{"x-queue-mode"} {
		if _, ok := t[k]; ok {
			return a, fmt.Errorf("argument '%s' is not supported by Keel", k)
		}
	}
	return a, nil
}

// intValue returns a table value of an integer type.
func intValue(v any) (int64, bool) {
	switch v := v.(type) {
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

// maxPriority is the highest x-max-priority, as RabbitMQ's (which
// recommends at most 10: each level costs a scan when serving).
const maxPriority = 255

// limited reports whether the queue has a length limit.
func (a *queueArgs) limited() bool { return a.maxLen >= 0 || a.maxBytes >= 0 }

// nonNegative reads an integer argument; -1 when absent.
func nonNegative(t wire.Table, k string) (int64, error) {
	v, ok := t[k]
	if !ok {
		return -1, nil
	}
	n, isInt := intValue(v)
	if !isInt {
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
