package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// shutdownTimeout bounds a graceful shutdown: stop accepting, answer or fail
// in-flight requests, flush and checkpoint.
const shutdownTimeout = 5 * time.Second

// service is one long-running part of the process (store, NameServer,
// broker, a remoting server).
type service struct {
	name string
	// run, if set, blocks until ctx is cancelled; returning earlier is a
	// failure that shuts the whole process down.
	run func(ctx context.Context) error
	// stop, if set, shuts the service down; it must return by ctx's deadline.
	stop func(ctx context.Context) error
}

// starter builds and starts one service; later starters may use what
// earlier ones built.
type starter func() (service, error)

// runServices starts the services in order, runs them until ctx is
// cancelled (a signal) or one of them fails, then stops them in reverse order
// within shutdownTimeout. If a start fails, the services already started are
// stopped.
func runServices(ctx context.Context, log *slog.Logger, starters ...starter) error {
	var wg sync.WaitGroup
	var svcs []service
	for _, start := range starters {
		s, err := start()
		if err != nil {
			return errors.Join(err, stopServices(log, svcs, &wg))
		}
		log.Debug("started", "service", s.name)
		svcs = append(svcs, s)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(svcs))
	for _, s := range svcs {
		if s.run == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.run(runCtx)
			if runCtx.Err() == nil {
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				errc <- fmt.Errorf("%s: %w", s.name, err)
			}
		}()
	}
	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case failed = <-errc:
		log.Error("shutting down after a failure", "err", failed)
	}
	cancel()
	return errors.Join(failed, stopServices(log, svcs, &wg))
}

func stopServices(log *slog.Logger, svcs []service, running *sync.WaitGroup) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	for i := len(svcs) - 1; i >= 0; i-- {
		s := svcs[i]
		if s.stop == nil {
			continue
		}
		if err := s.stop(ctx); err != nil {
			log.Error("stop failed", "service", s.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", s.name, err))
		}
	}
	done := make(chan struct{})
	go func() { running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("shutdown did not finish within %v", shutdownTimeout))
	}
	return errors.Join(errs...)
}
