package broker

// Subscriptions are the core's (core/subscription.go: TAG expressions,
// tag codes recomputed, the store filter); the adapter names them as the
// pull path does. SQL92 expressions are not supported: pulls with them get
// SYSTEM_ERROR with RocketMQ's remark (core.ErrUnsupported, errors.go).

import "github.com/keelmq/keel/internal/core"

type subscription = core.Subscription

// parseSubscription compiles a pull's own subscription expression.
func parseSubscription(topic, expr, exprType string, subVersion int64) (*subscription, error) {
	return core.ParseSubscription(topic, expr, exprType, subVersion)
}
