package httpd

import (
	"context"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// errorLogHandler is a slog.Handler that writes each record as one line to
// a *log.Logger, Server.ErrorLog: the transport's reports (conn's and the
// poller's, which log through slog) go where the server's own errors go, as
// net/http's do. A line is the level, the message and the attributes in
// slog's text form, without the time, which the log.Logger adds if its
// flags ask for it:
//
//	WARN poller: releases pending too long: ...; still waiting, never releasing early held_by=waiter waiter=0 stuck=11.7s releases=200 oldest=2/1 age=11.711s
type errorLogHandler struct {
	l      *log.Logger
	attrs  string // preformatted by WithAttrs, each with a leading space
	prefix string // the open groups' names, each followed by a dot
}

func newErrorLogHandler(l *log.Logger) *errorLogHandler { return &errorLogHandler{l: l} }

// Enabled reports Info and above, as slog's default logger does.
func (h *errorLogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (h *errorLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	return h.l.Output(2, b.String())
}

func (h *errorLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.prefix, a)
	}
	return &errorLogHandler{l: h.l, attrs: b.String(), prefix: h.prefix}
}

func (h *errorLogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &errorLogHandler{l: h.l, attrs: h.attrs, prefix: h.prefix + name + "."}
}

// appendAttr writes " key=value" for a, its key qualified by the open
// groups, a group's members each in turn; empty attributes are left out,
// as slog's handlers leave them.
func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, m := range a.Value.Group() {
			appendAttr(b, prefix, m)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(quoteIfNeeded(prefix + a.Key))
	b.WriteByte('=')
	b.WriteString(quoteIfNeeded(a.Value.String()))
}

// quoteIfNeeded quotes s as slog's text handler does: when it is empty or
// holds a space, '=', '"' or a character that is not printable.
func quoteIfNeeded(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r == '=' || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
		i += n
	}
	return s
}
