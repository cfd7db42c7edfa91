package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// SignalError is the cancellation cause of a context made by NotifyContext:
// the signal that stopped the run.
type SignalError struct {
	Signal os.Signal
}

func (e *SignalError) Error() string { return e.Signal.String() + " signal received" }

// ExitCode is the shell's convention for a process stopped by a signal:
// 128 plus the signal's number (130 for SIGINT, 143 for SIGTERM).
func (e *SignalError) ExitCode() int {
	if s, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return ExitInterrupted
}

// interruptError is the error, err, of a command stopped by cause: exit code
// 128+n for a signal n (a *SignalError), else ExitInterrupted.
func interruptError(cause, err error) error {
	if se, ok := errors.AsType[*SignalError](cause); ok {
		return &exitError{code: se.ExitCode(), err: err}
	}
	return &exitError{code: ExitInterrupted, err: err}
}

// NotifyContext returns a context that is cancelled, with a *SignalError as
// its cause, at the first SIGINT or SIGTERM. The run then winds down: it
// writes the episodes that finished and flushes its output.
//
// After that first signal the default handling is restored, so a second
// Ctrl-C ends the process at once (a policy stuck on a slow server must not
// make troupe unkillable). stop releases the signals; call it when done.
func NotifyContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(&SignalError{Signal: s})
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(context.Canceled)
		})
	}
}
