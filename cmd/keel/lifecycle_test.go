package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recorder records service events in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// svc is a service that runs until its context is done (or fails with
// runErr once started) and records its stop.
func (r *recorder) svc(name string, started chan<- struct{}, runErr error) starter {
	return func() (service, error) {
		r.add("start " + name)
		return service{
			name: name,
			run: func(ctx context.Context) error {
				if started != nil {
					started <- struct{}{}
				}
				if runErr != nil {
					return runErr
				}
				<-ctx.Done()
				return nil
			},
			stop: func(context.Context) error { r.add("stop " + name); return nil },
		}, nil
	}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestRunServicesStopsInReverseOnCancel(t *testing.T) {
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 3)
	done := make(chan error)
	go func() {
		done <- runServices(ctx, discard, r.svc("store", started, nil), r.svc("namesrv", started, nil), r.svc("broker", started, nil))
	}()
	for range 3 {
		<-started
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []string{"start store", "start namesrv", "start broker", "stop broker", "stop namesrv", "stop store"}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events %q, want %q", r.events, want)
	}
}

func TestRunServicesFailureStopsAll(t *testing.T) {
	var r recorder
	boom := errors.New("boom")
	err := runServices(context.Background(), discard, r.svc("store", nil, nil), r.svc("broker", nil, boom))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "broker: boom") {
		t.Fatalf("err = %v", err)
	}
	if !slices.Contains(r.events, "stop store") || !slices.Contains(r.events, "stop broker") {
		t.Fatalf("events %q", r.events)
	}
}

func TestRunServicesStartFailureStopsStarted(t *testing.T) {
	var r recorder
	boom := errors.New("listen failed")
	failing := func() (service, error) { return service{}, boom }
	err := runServices(context.Background(), discard, r.svc("store", nil, nil), failing, r.svc("never", nil, nil))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	want := []string{"start store", "stop store"}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events %q, want %q", r.events, want)
	}
}

func TestRunServicesUnexpectedReturnIsFailure(t *testing.T) {
	s := func() (service, error) {
		return service{name: "server", run: func(context.Context) error { return nil }}, nil
	}
	err := runServices(context.Background(), discard, s)
	if err == nil || !strings.Contains(err.Error(), "server: stopped unexpectedly") {
		t.Fatalf("err = %v", err)
	}
}
