package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/gracepoll/gracepoll/ws"
)

// event is what the server sends, as JSON text: a chat message
// ("msg"), a client joining or leaving ("join", "leave"), or, to the new
// client alone, the name the server gave it ("hello").
type event struct {
	Kind string `json:"kind"`
	From string `json:"from"`
	Text string `json:"text,omitempty"`
}

// limits are what one client may cost the others.
type limits struct {
	// maxMessage bounds a message received (ws fails the connection
	// with 1009 beyond it).
	maxMessage int64
	// rate and burst bound the bytes a client may have broadcast: a
	// token bucket refilled at rate bytes a second, holding at most
	// burst. Every message costs at least minCost, so that a flood of
	// empty messages is bounded too. A client beyond it is closed with
	// 1008: every byte it sends is sent again to every client.
	rate, burst float64
	// maxUnread is conn's MaxQueued, named in the log when a client is
	// dropped for it.
	maxUnread int
}

// minCost is the least a message takes from the bucket.
const minCost = 256

// room is the chat room: the clients connected, each sent every message.
type room struct {
	limits
	log *log.Logger

	// clients is read by every broadcast while clients come and go on
	// other waiters: a concurrent map, so that a broadcast never waits
	// for a join.
	clients *xsync.MapOf[*ws.Conn, *client]
	nextID  atomic.Uint64

	// Counters for the log at shutdown and for the tests.
	slow, limited atomic.Int64
	// closing is set when the server shuts down.
	closing atomic.Bool
}

// client is a connection's state. OnMessage runs for it on one waiter at
// a time, so the bucket needs no lock.
type client struct {
	name   string   // "nick#id": unique, so a sender cannot pass for another
	addr   net.Addr // for the log: the connection's is gone by OnClose
	tokens float64
	last   time.Time
	kicked bool // closed for sending too fast: what it still sends is dropped
}

func newRoom(l limits, logger *log.Logger) *room {
	return &room{limits: l, log: logger, clients: xsync.NewMapOf[*ws.Conn, *client]()}
}

// nickname cleans the name a client asked for: printable, at most 24
// characters, "guest" if nothing is left.
func nickname(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == 24 {
			break
		}
		if r == utf8.RuneError || !unicode.IsPrint(r) || r == '#' {
			continue
		}
		b.WriteRune(r)
		n++
	}
	if name := strings.TrimSpace(b.String()); name != "" {
		return name
	}
	return "guest"
}

// join adds a connection under the nickname it asked for.
func (rm *room) join(c *ws.Conn, nick string) {
	cl := &client{
		name:   nickname(nick) + "#" + strconv.FormatUint(rm.nextID.Add(1), 10),
		addr:   c.RemoteAddr(),
		tokens: rm.burst,
		last:   time.Now(),
	}
	c.SetValue(cl)
	rm.log.Printf("%s (%v) joined", cl.name, cl.addr)
	// The client learns its name before anything else it receives, and
	// is in the room (sees its own join) before the others learn of it.
	rm.send(c, event{Kind: "hello", From: cl.name})
	rm.clients.Store(c, cl)
	rm.broadcast(event{Kind: "join", From: cl.name})
}

// send writes an event to one connection.
func (rm *room) send(c *ws.Conn, e event) {
	b, _ := json.Marshal(e) // strings only: cannot fail
	// An error means c is gone or going (ErrSlowReader: ws has reset
	// it); its OnClose takes it out of the room.
	c.WriteMessage(ws.OpText, b)
}

// broadcast sends an event to every client, encoded once: one
// PreparedMessage, its frame (and its compressed frame, for the clients
// that agreed permessage-deflate) shared by every write. Writes never
// block: a client that does not read costs the others nothing, and is
// dropped once it has left conn's MaxQueued unread.
func (rm *room) broadcast(e event) {
	b, _ := json.Marshal(e)
	pm, err := ws.NewPreparedMessage(ws.OpText, b)
	if err != nil {
		rm.log.Printf("broadcast: %v", err) // json.Marshal makes UTF-8
		return
	}
	rm.clients.Range(func(c *ws.Conn, _ *client) bool {
		c.WritePrepared(pm) // as in send
		return true
	})
}

// allow takes a message of n bytes from cl's bucket.
func (rm *room) allow(cl *client, n int) bool {
	now := time.Now()
	cl.tokens = min(rm.burst, cl.tokens+now.Sub(cl.last).Seconds()*rm.rate)
	cl.last = now
	cost := float64(max(n, minCost))
	if cl.tokens < cost {
		return false
	}
	cl.tokens -= cost
	return true
}

// chatHandler is the room's ws.Handler, one per connection: it carries
// the nickname asked for in the URL (/ws?name=alice) to OnOpen.
type chatHandler struct {
	rm   *room
	nick string
}

// OnOpen runs before any other method for c, so the client set there is
// in place for OnMessage and OnClose.
func (h chatHandler) OnOpen(c *ws.Conn) { h.rm.join(c, h.nick) }

func (h chatHandler) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) {
	cl := c.Value().(*client)
	if op != ws.OpText {
		c.Close(ws.StatusUnsupportedData, "text messages only")
		return
	}
	if cl.kicked {
		return
	}
	if !h.rm.allow(cl, len(data)) {
		cl.kicked = true
		h.rm.limited.Add(1)
		c.Close(ws.StatusPolicyViolation, "sending too fast")
		return
	}
	// data is the read buffer's: Marshal copies it into the event.
	h.rm.broadcast(event{Kind: "msg", From: cl.name, Text: string(data)})
}

func (h chatHandler) OnClose(c *ws.Conn, err *ws.CloseError) {
	cl := c.Value().(*client)
	// At shutdown everyone leaves at once: telling each of the others
	// would cost a write per pair, all refused (their close frame is out).
	if _, ok := h.rm.clients.LoadAndDelete(c); ok && !h.rm.closing.Load() {
		h.rm.broadcast(event{Kind: "leave", From: cl.name})
	}
	if errors.Is(err, ws.ErrSlowReader) {
		h.rm.slow.Add(1)
	}
	// The shutdown's 1001 to every client is said once, by run.
	if h.rm.closing.Load() && !err.Remote && err.Code == ws.StatusGoingAway && err.Err == nil {
		return
	}
	h.rm.log.Printf("%s (%v) %s", cl.name, cl.addr, h.rm.why(err))
}

// why says how a connection ended, for the log: who ended it, the close
// code with its meaning or reason, and the cause when it adds to them
// (a failure's reason is often the cause's own text, said once).
func (rm *room) why(err *ws.CloseError) string {
	switch {
	case errors.Is(err, ws.ErrSlowReader):
		return fmt.Sprintf("dropped: it left more than -max-unread (%d bytes) unread", rm.maxUnread)
	case errors.Is(err, ws.ErrPingTimeout):
		return fmt.Sprintf("dropped: no answer to a ping in %v", pingInterval)
	case errors.Is(err, ws.ErrCloseTimeout):
		return "dropped: no close frame in answer to the server's"
	case err.Code == ws.StatusAbnormal:
		if err.Err == nil {
			return "disconnected without a close frame"
		}
		return "disconnected without a close frame: " + err.Err.Error()
	}
	var s string
	switch {
	case err.Remote && (err.Code == ws.StatusNormal || err.Code == ws.StatusGoingAway || err.Code == ws.StatusNoStatus):
		s = "left"
	case err.Remote:
		s = fmt.Sprintf("left with %d", err.Code)
	default:
		s = fmt.Sprintf("closed by the server with %d", err.Code)
	}
	switch {
	case err.Reason == "":
	case err.Remote: // the client's text: quoted, so that it cannot forge log lines
		s += ": " + strconv.Quote(err.Reason)
	default:
		s += ": " + err.Reason
	}
	if err.Err != nil && !strings.Contains(err.Reason, err.Err.Error()) {
		s += " (" + err.Err.Error() + ")"
	}
	return s
}
