// Package e2e drives an in-process NameServer and Broker with the
// transaction engine through the official RocketMQ Go client's
// TransactionProducer and PushConsumer. The broker's files live on a
// crash-simulating in-memory filesystem, so a "kill -9" is a CrashClone of
// it: the restarted broker sees exactly what was durable. Every wait polls
// a condition with a deadline.
package e2e
