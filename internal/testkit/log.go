package testkit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// logKeep is how many reports a Log keeps for printing.
const logKeep = 8

// Log counts reports and keeps the first few, for stress tests that count
// every violation but print only the first ones. It is safe for concurrent
// use.
type Log struct {
	n    atomic.Int64
	mu   sync.Mutex
	msgs []string
}

// Add counts a report and keeps it if it is among the first few.
func (l *Log) Add(format string, a ...any) {
	if l.n.Add(1) > logKeep {
		return
	}
	l.mu.Lock()
	l.msgs = append(l.msgs, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

// Count returns how many reports were added.
func (l *Log) Count() int64 { return l.n.Load() }

// String returns the kept reports, one per line, each indented by a tab.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return "\t" + strings.Join(l.msgs, "\n\t")
}
