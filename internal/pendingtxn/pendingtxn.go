// Package pendingtxn describes undecided transactions (half messages not
// yet committed or rolled back) as every part of Keel reports them: the
// transaction engine lists them, the RocketMQ front door sends the list
// as the JSON body of Keel's ReqListTransactions, and the admin client
// (the keel txn command, the console) reads that body. One definition of
// the shape, so the writer and the readers cannot drift apart. Standard
// library only: it knows no protocol, store or broker.
package pendingtxn

import "time"

// Transaction describes one undecided half message.
type Transaction struct {
	TransactionID   string `json:"transactionId"`
	Topic           string `json:"topic"` // the real topic (the half is stored elsewhere)
	QueueID         int32  `json:"queueId"`
	ProducerGroup   string `json:"producerGroup"`
	HalfOffset      int64  `json:"halfOffset"`      // queue offset in the half topic
	CommitLogOffset int64  `json:"commitLogOffset"` // the half record's CommitLog offset
	StoreTimeMs     int64  `json:"storeTimeMs"`
	AgeMs           int64  `json:"ageMs"`
	Checks          int32  `json:"checks"` // check-backs sent so far
}

// Age is t's age as a duration.
func (t Transaction) Age() time.Duration { return time.Duration(t.AgeMs) * time.Millisecond }

// List lists undecided half messages.
type List struct {
	Total   int           `json:"total"` // matching entries before the limit
	Pending []Transaction `json:"pending"`
}
