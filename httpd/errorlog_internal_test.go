package httpd

import (
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestErrorLogHandler checks the lines the transport's slog records become
// in a *log.Logger: level, message, attributes as slog's text handler
// writes them, groups qualifying keys, Debug left out.
func TestErrorLogHandler(t *testing.T) {
	var b strings.Builder
	l := slog.New(newErrorLogHandler(log.New(&b, "p: ", 0)))
	l.Warn("poller: held; never releasing early", "waiter", 0, "age", 11711*time.Millisecond, "held_by", "own handler", "waiters", []int{0, 2})
	l.With("a", 1).WithGroup("g").With("b", "x=y").Info("m", slog.Group("h", "c", true), "empty", "", slog.Group("", "d", 2.5))
	l.Debug("left out")
	l.Error("e", "err", "bad\nline", slog.Attr{})
	want := `p: WARN poller: held; never releasing early waiter=0 age=11.711s held_by="own handler" waiters="[0 2]"
p: INFO m a=1 g.b="x=y" g.h.c=true g.empty="" g.d=2.5
p: ERROR e err="bad\nline"
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
