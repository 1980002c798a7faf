package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lni/dragonboat/v4/logger"
)

// slogFactory makes dragonboat's package loggers log to log, with the
// package's name as an attribute. The level log's handler was given
// filters them; SetLevel changes nothing.
func slogFactory(log *slog.Logger) logger.Factory {
	return func(pkg string) logger.ILogger {
		return slogLogger{log.With("pkg", pkg)}
	}
}

type slogLogger struct {
	log *slog.Logger
}

func (l slogLogger) logf(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, fmt.Sprintf(format, args...))
	}
}

func (slogLogger) SetLevel(logger.LogLevel) {}

func (l slogLogger) Debugf(format string, args ...any) { l.logf(slog.LevelDebug, format, args) }
func (l slogLogger) Infof(format string, args ...any)  { l.logf(slog.LevelInfo, format, args) }
func (l slogLogger) Warningf(format string, args ...any) {
	l.logf(slog.LevelWarn, format, args)
}
func (l slogLogger) Errorf(format string, args ...any) { l.logf(slog.LevelError, format, args) }

// Panicf logs and panics, as dragonboat expects of it, with an error:
// NewNodeHost recovers from a panic of any other value and returns
// nothing.
func (l slogLogger) Panicf(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	l.log.Error(err.Error())
	panic(err)
}
