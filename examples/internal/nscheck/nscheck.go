// Package nscheck explains an example's failure to find a topic's route:
// the official RocketMQ client says only "route info not found" both for a
// topic that does not exist and for a -n address that is not a NameServer
// (a broker's port, Keel's HTTP, Kafka or AMQP port). Explain asks the
// address what it is, as the keel CLI does, and says so.
package nscheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/admin"
)

// Explain returns err, with what answered at namesrv when err is the
// client's "route info not found" and namesrv is not a NameServer.
func Explain(err error, namesrv string) error {
	if err == nil || !strings.Contains(err.Error(), "route info not found") {
		return err
	}
	ac := admin.New(admin.Config{NamesrvAddrs: []string{namesrv}, Timeout: 5 * time.Second})
	defer ac.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, cerr := ac.Brokers(ctx)
	var wrong *admin.NotNamesrvError
	if errors.As(cerr, &wrong) {
		return fmt.Errorf("%w: -n %s is not a NameServer (it looks like %s); keel serve's NameServer listens on 127.0.0.1:9876 by default", err, namesrv, wrong.Looks)
	}
	return err
}
