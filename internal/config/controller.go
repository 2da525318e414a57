package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Controller is the configuration of a controller node (keel controller
// -c controller.conf): RocketMQ's controller key names where they exist,
// Keel's own otherwise (docs/configuration.md, "Controller keys").
type Controller struct {
	// StorePath (controllerStorePath): the raft log, snapshots and the
	// cluster id. --data-dir overrides it.
	StorePath string
	// Peers (controllerDLegerPeers): the voters "id-host:port;...", read
	// only by a --bootstrap without a list; afterwards the membership is
	// in the raft log.
	Peers string
	// SelfID (controllerDLegerSelfId): this node's raft id; empty = its
	// advertised address.
	SelfID string
	// Listen (controllerListen, Keel): raft and the controller's RPCs on
	// one port. --controller-listen overrides it.
	Listen string
	// Advertise (controllerAdvertise, Keel): the address other voters,
	// brokers and the CLI dial; empty = Listen when it names a host.
	Advertise string
	// ElectUncleanMaster (enableElectUncleanMaster): elect outside the
	// in-sync set when no member answers (may lose acknowledged messages).
	ElectUncleanMaster bool
	// NotifyBrokerRoleChanged (notifyBrokerRoleChanged): push the new view
	// to a group's brokers after an election.
	NotifyBrokerRoleChanged bool
	// ScanInterval (scanInactiveMasterInterval, ms): how often the leader
	// checks for silent masters.
	ScanInterval time.Duration
	// DetectionPeriod (controllerHeartBeatTimeoutMills, ms): a master
	// silent this long is replaced.
	DetectionPeriod time.Duration
	// FenceTimeout (controllerFenceTimeoutMillis, Keel, ms): how long an
	// election waits for the candidates' fence answers.
	FenceTimeout time.Duration
	// LeaseDuration (controllerLeaseMillis, Keel, ms): the lease an
	// ASYNC_MASTER gets with each heartbeat answer; 0 = half the
	// detection period.
	LeaseDuration time.Duration
}

// DefaultControllerListen is the controller's listen address by default.
const DefaultControllerListen = ":9878"

// DefaultController returns the controller defaults.
func DefaultController() *Controller {
	return &Controller{
		StorePath:               "./keel-controller",
		Listen:                  DefaultControllerListen,
		NotifyBrokerRoleChanged: true,
		ScanInterval:            500 * time.Millisecond,
		DetectionPeriod:         6 * time.Second,
		FenceTimeout:            time.Second,
	}
}

type controllerField struct {
	key string
	set func(c *Controller, v string) error
	get func(c *Controller) string
}

func cstr(key string, p func(*Controller) *string) controllerField {
	return controllerField{key, func(c *Controller, v string) error { *p(c) = v; return nil }, func(c *Controller) string { return *p(c) }}
}

func cbool(key string, p func(*Controller) *bool) controllerField {
	return controllerField{key, func(c *Controller, v string) error {
		switch strings.ToLower(v) {
		case "true":
			*p(c) = true
		case "false":
			*p(c) = false
		default:
			return errNotBool
		}
		return nil
	}, func(c *Controller) string { return strconv.FormatBool(*p(c)) }}
}

func cms(key string, p func(*Controller) *time.Duration) controllerField {
	return controllerField{key, func(c *Controller, v string) error {
		n, err := parseCount(v, math.MaxInt64/int64(time.Millisecond))
		if err == nil {
			*p(c) = time.Duration(n) * time.Millisecond
		}
		return err
	}, func(c *Controller) string { return strconv.FormatInt(int64(*p(c)/time.Millisecond), 10) }}
}

// controllerFields lists every controller key, in docs order.
var controllerFields = []controllerField{
	cstr("controllerStorePath", func(c *Controller) *string { return &c.StorePath }),
	cstr("controllerDLegerPeers", func(c *Controller) *string { return &c.Peers }),
	cstr("controllerDLegerSelfId", func(c *Controller) *string { return &c.SelfID }),
	cstr("controllerListen", func(c *Controller) *string { return &c.Listen }),
	cstr("controllerAdvertise", func(c *Controller) *string { return &c.Advertise }),
	cbool("enableElectUncleanMaster", func(c *Controller) *bool { return &c.ElectUncleanMaster }),
	cbool("notifyBrokerRoleChanged", func(c *Controller) *bool { return &c.NotifyBrokerRoleChanged }),
	cms("scanInactiveMasterInterval", func(c *Controller) *time.Duration { return &c.ScanInterval }),
	cms("controllerHeartBeatTimeoutMills", func(c *Controller) *time.Duration { return &c.DetectionPeriod }),
	cms("controllerFenceTimeoutMillis", func(c *Controller) *time.Duration { return &c.FenceTimeout }),
	cms("controllerLeaseMillis", func(c *Controller) *time.Duration { return &c.LeaseDuration }),
}

// controllerUnsupported are RocketMQ controller keys Keel reads but does
// not need, with what to tell the user.
var controllerUnsupported = map[string]string{
	"controllerDLegerGroup":                    "a Keel controller cluster is identified by the cluster id written at bootstrap",
	"controllerType":                           "Keel's controller is raft (hashicorp/raft); there is no DLedger or JRaft choice",
	"enableControllerInNamesrv":                "keel namesrv --controller-listen ADDR runs a controller voter in the NameServer process",
	"controllerThreadPoolNums":                 "JVM thread pool tuning has no effect in Keel",
	"controllerRequestThreadPoolQueueCapacity": "JVM thread pool tuning has no effect in Keel",
	"mappedFileSize":                           "the controller's raft log is a bbolt file, not mapped segments",
	"scanNotActiveBrokerInterval":              "use scanInactiveMasterInterval: liveness is checked in the same scan",
	"electMasterMaxRetryCount":                 "the leader retries an election at every scan until one commits",
}

// ControllerKeys returns every supported controller key.
func ControllerKeys() []string {
	keys := make([]string, len(controllerFields))
	for i, f := range controllerFields {
		keys[i] = f.key
	}
	return keys
}

// Set sets one controller key from its text (flags override the file).
func (c *Controller) Set(key, value string) error {
	for _, f := range controllerFields {
		if f.key == key {
			value = strings.TrimSpace(value)
			if err := f.set(c, value); err != nil {
				return &ValueError{Key: key, Value: value, Err: err}
			}
			return nil
		}
	}
	return fmt.Errorf("%w %q", ErrUnknownKey, key)
}

// Get prints one controller key's value in the file's units.
func (c *Controller) Get(key string) (string, bool) {
	for _, f := range controllerFields {
		if f.key == key {
			return f.get(c), true
		}
	}
	return "", false
}

// LoadController reads a controller.conf over DefaultController; unknown
// keys are returned, as Load does for broker.conf.
func LoadController(path string) (*Controller, []Unknown, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return ParseController(data, path)
}

// ParseController is LoadController for a file's contents.
func ParseController(data []byte, name string) (*Controller, []Unknown, error) {
	props, err := ParseProperties(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %s: %w", name, err)
	}
	c := DefaultController()
	var unknown []Unknown
	seen := map[string]int{}
	for _, p := range props {
		if _, ok := c.Get(p.Key); !ok {
			unknown = append(unknown, Unknown{Key: p.Key, Value: p.Value, Line: p.Line, Hint: controllerUnsupported[p.Key]})
			continue
		}
		if prev, dup := seen[p.Key]; dup {
			return nil, nil, fmt.Errorf("config: %s:%d: %s is already set on line %d", name, p.Line, p.Key, prev)
		}
		seen[p.Key] = p.Line
		if err := c.Set(p.Key, p.Value); err != nil {
			var ve *ValueError
			if errors.As(err, &ve) {
				ve.Origin = fmt.Sprintf("%s:%d", name, p.Line)
			}
			return nil, nil, err
		}
	}
	return c, unknown, nil
}

// Validate checks ranges and relations, reporting every problem.
func (c *Controller) Validate() error {
	var errs []error
	bad := func(key, msg string) { errs = append(errs, fmt.Errorf("config: %s: %s", key, msg)) }
	if c.StorePath == "" {
		bad("controllerStorePath", "must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("controllerListen", "want host:port or :port")
	}
	if c.Advertise != "" {
		if h, _, err := net.SplitHostPort(c.Advertise); err != nil || h == "" {
			bad("controllerAdvertise", "want host:port")
		}
	}
	if c.ScanInterval < 10*time.Millisecond {
		bad("scanInactiveMasterInterval", "must be at least 10 ms")
	}
	if c.DetectionPeriod < 2*c.ScanInterval || c.DetectionPeriod < time.Second {
		bad("controllerHeartBeatTimeoutMills", "must be at least 1000 ms and twice scanInactiveMasterInterval")
	}
	if c.FenceTimeout <= 0 || c.FenceTimeout >= c.DetectionPeriod {
		bad("controllerFenceTimeoutMillis", "must be above 0 and below controllerHeartBeatTimeoutMills")
	}
	if l := c.LeaseDuration; l != 0 && (l < 100*time.Millisecond || l+l/10 > c.DetectionPeriod) {
		// A new raft leader waits one detection period before electing:
		// a lease an earlier leader granted (and its tenth as a margin
		// for clock rates) must end within it.
		bad("controllerLeaseMillis", "must be 0 (half of controllerHeartBeatTimeoutMills) or at least 100 ms, and with a tenth added at most controllerHeartBeatTimeoutMills")
	}
	return errors.Join(errs...)
}

// AdvertiseAddr is the address others dial: Advertise, else Listen when
// it names a host.
func (c *Controller) AdvertiseAddr() (string, error) {
	if c.Advertise != "" {
		return c.Advertise, nil
	}
	h, _, err := net.SplitHostPort(c.Listen)
	if err != nil || h == "" || h == "0.0.0.0" || h == "::" {
		return "", fmt.Errorf("config: controllerListen %q names no host others can dial: set controllerAdvertise (--controller-advertise)", c.Listen)
	}
	return c.Listen, nil
}
