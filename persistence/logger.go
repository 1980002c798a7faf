package persistence

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger adapts slog to Pebble's Logger. Pebble's informational
// chatter goes to debug level so the log stays quiet at info.
type pebbleLogger struct {
	log *slog.Logger
	// fatal records a Fatalf before it panics (see Fatalf).
	fatal func(error)
}

// Infof implements pebble.Logger.
func (p *pebbleLogger) Infof(format string, args ...any) {
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		p.log.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

// Errorf implements pebble.Logger.
func (p *pebbleLogger) Errorf(format string, args ...any) {
	p.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf implements pebble.Logger. Pebble calls it when it cannot go on
// (a failed WAL write or sync, a failed MANIFEST sync) and requires that
// it not return. It marks the log failed and panics with a *fatalError;
// the writer goroutine recovers that panic (see commitBatch), any other
// goroutine dies with it, as with Pebble's default logger.
func (p *pebbleLogger) Fatalf(format string, args ...any) {
	err := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.causes = append(err.causes, e)
		}
	}
	p.fatal(err)
	panic(err)
}

// fatalError is a failure Pebble reported through Fatalf. It wraps the
// errors among Fatalf's arguments, so errors.Is finds the cause.
type fatalError struct {
	msg    string
	causes []error
}

func (e *fatalError) Error() string   { return e.msg }
func (e *fatalError) Unwrap() []error { return e.causes }
