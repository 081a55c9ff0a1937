package cluster

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns a zap logger, as etcd's server and client want, that
// passes entries at min and above to l and drops the rest: etcd logs every
// raft step at info, which would drown the daemon's own log (the server
// passes warn; the client, which warns of every failed call it retries,
// passes error: the caller sees the failure as an error anyway).
//
// While quiet is set, nothing passes: a member that is being closed
// logs its listeners' shutdown as errors, which are not.
func zapToSlog(l *slog.Logger, min zapcore.Level, quiet *atomic.Bool) *zap.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if quiet == nil {
		quiet = new(atomic.Bool)
	}
	return zap.New(slogCore{l: l, min: min, quiet: quiet})
}

// slogCore is a zapcore.Core that writes to a slog.Logger.
type slogCore struct {
	l      *slog.Logger
	min    zapcore.Level
	quiet  *atomic.Bool
	fields []zapcore.Field
}

func (c slogCore) Enabled(lvl zapcore.Level) bool { return lvl >= c.min && !c.quiet.Load() }

func (c slogCore) With(fs []zapcore.Field) zapcore.Core {
	return slogCore{l: c.l, min: c.min, quiet: c.quiet, fields: append(slices.Clip(c.fields), fs...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	lvl := slog.LevelWarn
	if e.Level > zapcore.WarnLevel {
		lvl = slog.LevelError
	}
	c.l.LogAttrs(context.Background(), lvl, e.Message, attrs...)
	return nil
}

func (c slogCore) Sync() error { return nil }
