package store

import (
	"bytes"
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/examples/kv/resp"
)

// Session is one client's state: commands read and change it.
type Session struct {
	ID   int64  // CLIENT ID
	Name string // CLIENT SETNAME
	Quit bool   // QUIT was sent: close the connection after the reply
}

// command is one entry of the command table.
type command struct {
	// arity counts the command's name: n means exactly n arguments, -n at
	// least n (Redis's convention).
	arity int
	run   func(s *Store, c *Session, args [][]byte, out []byte) []byte
}

// commands is the command table, by lower-case name.
var commands map[string]command

func init() {
	commands = map[string]command{
		"ping": {-1, ping}, "echo": {2, echo}, "quit": {-1, quit}, "select": {2, selectDB},
		"set": {-3, set}, "get": {2, get}, "del": {-2, del}, "exists": {-2, exists}, "type": {2, typ},
		"incr": {2, incrBy(1)}, "decr": {2, incrBy(-1)}, "incrby": {3, incrBy(0)}, "decrby": {3, incrBy(0)},
		"mget": {-2, mget}, "mset": {-3, mset}, "strlen": {2, strlen},
		"lpush": {-3, push(true)}, "rpush": {-3, push(false)}, "lpop": {-2, pop(true)}, "rpop": {-2, pop(false)},
		"llen": {2, llen}, "lrange": {4, lrange},
		"dbsize": {1, dbsize}, "flushdb": {-1, flush}, "flushall": {-1, flush},
		"command": {-1, commandCmd}, "config": {-2, config}, "client": {-2, client},
		"hello": {-1, hello}, "info": {-1, info},
	}
}

// Reply texts shared by several commands.
const (
	errSyntax    = "ERR syntax error"
	errNotInt    = "ERR value is not an integer or out of range"
	errWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
)

// Exec runs the command args (its name first, then its arguments) for the
// client c and appends its reply to out. The arguments may alias the
// caller's input buffer: the store copies what it keeps.
func (s *Store) Exec(c *Session, args [][]byte, out []byte) []byte {
	var lower [24]byte
	name := args[0]
	if len(name) > len(lower) {
		return unknown(out, args)
	}
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		lower[i] = ch
	}
	cmd, ok := commands[string(lower[:len(name)])]
	if !ok {
		return unknown(out, args)
	}
	if cmd.arity > 0 && len(args) != cmd.arity || cmd.arity < 0 && len(args) < -cmd.arity {
		return resp.AppendError(out, "ERR wrong number of arguments for '"+string(lower[:len(name)])+"' command")
	}
	return cmd.run(s, c, args, out)
}

func unknown(out []byte, args [][]byte) []byte {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.WriteString(clip(args[0]))
	b.WriteString("', with args beginning with: ")
	for _, a := range args[1:min(len(args), 4)] {
		b.WriteString("'" + clip(a) + "' ")
	}
	return resp.AppendError(out, b.String())
}

// clip quotes at most 128 bytes of an argument in an error, without line
// breaks (which would end the error reply).
func clip(a []byte) string {
	a = a[:min(len(a), 128)]
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, string(a))
}

func ping(_ *Store, _ *Session, args [][]byte, out []byte) []byte {
	switch len(args) {
	case 1:
		return resp.AppendSimple(out, "PONG")
	case 2:
		return resp.AppendBulk(out, args[1])
	}
	return resp.AppendError(out, "ERR wrong number of arguments for 'ping' command")
}

func echo(_ *Store, _ *Session, args [][]byte, out []byte) []byte {
	return resp.AppendBulk(out, args[1])
}

func quit(_ *Store, c *Session, _ [][]byte, out []byte) []byte {
	c.Quit = true
	return resp.AppendSimple(out, "OK")
}

func selectDB(_ *Store, _ *Session, args [][]byte, out []byte) []byte {
	n, err := strconv.Atoi(string(args[1]))
	switch {
	case err != nil:
		return resp.AppendError(out, errNotInt)
	case n != 0:
		return resp.AppendError(out, "ERR DB index is out of range")
	}
	return resp.AppendSimple(out, "OK")
}

// set is SET key value [NX|XX] [GET] [EX seconds|PX milliseconds|KEEPTTL].
func set(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	var nx, xx, getOld, keepTTL bool
	var ttl time.Duration
	for i := 3; i < len(args); i++ {
		switch opt := strings.ToUpper(string(args[i])); {
		case opt == "NX" && !xx:
			nx = true
		case opt == "XX" && !nx:
			xx = true
		case opt == "GET":
			getOld = true
		case opt == "KEEPTTL" && ttl == 0:
			keepTTL = true
		case (opt == "EX" || opt == "PX") && ttl == 0 && !keepTTL && i+1 < len(args):
			i++
			n, err := strconv.ParseInt(string(args[i]), 10, 64)
			if err != nil {
				return resp.AppendError(out, errNotInt)
			}
			unit := time.Second
			if opt == "PX" {
				unit = time.Millisecond
			}
			if n <= 0 || n > math.MaxInt64/int64(unit) {
				return resp.AppendError(out, "ERR invalid expire time in 'set' command")
			}
			ttl = time.Duration(n) * unit
		default:
			return resp.AppendError(out, errSyntax)
		}
	}
	key, val := args[1], args[2]
	sh := s.shard(key)
	defer sh.mu.Unlock()
	e := sh.get(key)
	if getOld && e != nil && e.list != nil {
		return resp.AppendError(out, errWrongType)
	}
	reply := func() []byte {
		if !getOld {
			return resp.AppendSimple(out, "OK")
		}
		if e == nil {
			return resp.AppendNull(out)
		}
		return resp.AppendBulk(out, e.str)
	}
	if nx && e != nil || xx && e == nil {
		if getOld {
			return reply()
		}
		return resp.AppendNull(out)
	}
	if getOld {
		out = reply() // before the value is overwritten
	}
	var expireAt int64
	switch {
	case ttl > 0:
		expireAt = time.Now().Add(ttl).UnixNano()
	case keepTTL && e != nil:
		expireAt = e.expireAt
	}
	if e == nil || e.list != nil {
		sh.m[string(key)] = &entry{str: append([]byte(nil), val...), expireAt: expireAt}
	} else {
		e.str = append(e.str[:0], val...) // readers copy under the lock
		e.expireAt = expireAt
	}
	if getOld {
		return out
	}
	return resp.AppendSimple(out, "OK")
}

func get(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	sh := s.shard(args[1])
	defer sh.mu.Unlock()
	switch e := sh.get(args[1]); {
	case e == nil:
		return resp.AppendNull(out)
	case e.list != nil:
		return resp.AppendError(out, errWrongType)
	default:
		return resp.AppendBulk(out, e.str)
	}
}

func strlen(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	sh := s.shard(args[1])
	defer sh.mu.Unlock()
	switch e := sh.get(args[1]); {
	case e == nil:
		return resp.AppendInt(out, 0)
	case e.list != nil:
		return resp.AppendError(out, errWrongType)
	default:
		return resp.AppendInt(out, int64(len(e.str)))
	}
}

func mget(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	out = resp.AppendArray(out, len(args)-1)
	for _, key := range args[1:] {
		sh := s.shard(key)
		if e := sh.get(key); e == nil || e.list != nil {
			out = resp.AppendNull(out)
		} else {
			out = resp.AppendBulk(out, e.str)
		}
		sh.mu.Unlock()
	}
	return out
}

// mset sets each key in turn: unlike Redis's, it is not atomic across
// shards.
func mset(s *Store, c *Session, args [][]byte, out []byte) []byte {
	if len(args)%2 != 1 {
		return resp.AppendError(out, "ERR wrong number of arguments for 'mset' command")
	}
	for i := 1; i < len(args); i += 2 {
		set(s, c, args[i-1:i+2:i+2], nil) // args[i-1] stands in for the name
	}
	return resp.AppendSimple(out, "OK")
}

func del(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	n := 0
	for _, key := range args[1:] {
		sh := s.shard(key)
		if sh.get(key) != nil {
			delete(sh.m, string(key))
			n++
		}
		sh.mu.Unlock()
	}
	return resp.AppendInt(out, int64(n))
}

func exists(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	n := 0
	for _, key := range args[1:] {
		sh := s.shard(key)
		if sh.get(key) != nil {
			n++
		}
		sh.mu.Unlock()
	}
	return resp.AppendInt(out, int64(n))
}

func typ(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	sh := s.shard(args[1])
	defer sh.mu.Unlock()
	switch e := sh.get(args[1]); {
	case e == nil:
		return resp.AppendSimple(out, "none")
	case e.list != nil:
		return resp.AppendSimple(out, "list")
	}
	return resp.AppendSimple(out, "string")
}

// incrBy returns INCR (by 1), DECR (by -1), or with by 0 INCRBY and
// DECRBY, which take the amount as an argument.
func incrBy(by int64) func(*Store, *Session, [][]byte, []byte) []byte {
	return func(s *Store, _ *Session, args [][]byte, out []byte) []byte {
		delta := by
		if delta == 0 {
			n, err := strconv.ParseInt(string(args[2]), 10, 64)
			if err != nil {
				return resp.AppendError(out, errNotInt)
			}
			if delta = n; bytes.EqualFold(args[0], []byte("decrby")) {
				if n == math.MinInt64 {
					return resp.AppendError(out, "ERR decrement would overflow")
				}
				delta = -n
			}
		}
		sh := s.shard(args[1])
		defer sh.mu.Unlock()
		e := sh.get(args[1])
		var n int64
		if e != nil {
			if e.list != nil {
				return resp.AppendError(out, errWrongType)
			}
			var err error
			if n, err = strconv.ParseInt(string(e.str), 10, 64); err != nil {
				return resp.AppendError(out, errNotInt)
			}
		}
		if delta > 0 && n > math.MaxInt64-delta || delta < 0 && n < math.MinInt64-delta {
			return resp.AppendError(out, "ERR increment or decrement would overflow")
		}
		n += delta
		if e == nil {
			e = &entry{}
			sh.m[string(args[1])] = e
		}
		e.str = strconv.AppendInt(e.str[:0], n, 10)
		return resp.AppendInt(out, n)
	}
}

// push returns LPUSH (front) or RPUSH.
func push(front bool) func(*Store, *Session, [][]byte, []byte) []byte {
	return func(s *Store, _ *Session, args [][]byte, out []byte) []byte {
		sh := s.shard(args[1])
		defer sh.mu.Unlock()
		e := sh.get(args[1])
		switch {
		case e == nil:
			e = &entry{list: &deque{}}
			sh.m[string(args[1])] = e
		case e.list == nil:
			return resp.AppendError(out, errWrongType)
		}
		for _, v := range args[2:] {
			v = append([]byte(nil), v...)
			if front {
				e.list.pushFront(v)
			} else {
				e.list.pushBack(v)
			}
		}
		return resp.AppendInt(out, int64(e.list.n))
	}
}

// pop returns LPOP (front) or RPOP: key [count].
func pop(front bool) func(*Store, *Session, [][]byte, []byte) []byte {
	return func(s *Store, _ *Session, args [][]byte, out []byte) []byte {
		count := -1 // no count: one element, not an array
		switch len(args) {
		case 2:
		case 3:
			n, err := strconv.Atoi(string(args[2]))
			if err != nil || n < 0 {
				return resp.AppendError(out, "ERR value is out of range, must be positive")
			}
			count = n
		default:
			return resp.AppendError(out, errSyntax)
		}
		sh := s.shard(args[1])
		defer sh.mu.Unlock()
		e := sh.get(args[1])
		switch {
		case e == nil && count < 0:
			return resp.AppendNull(out)
		case e == nil:
			return resp.AppendNullArray(out)
		case e.list == nil:
			return resp.AppendError(out, errWrongType)
		}
		take := func() []byte {
			if front {
				return e.list.popFront()
			}
			return e.list.popBack()
		}
		if count < 0 {
			out = resp.AppendBulk(out, take())
		} else {
			count = min(count, e.list.n)
			out = resp.AppendArray(out, count)
			for range count {
				out = resp.AppendBulk(out, take())
			}
		}
		if e.list.n == 0 {
			delete(sh.m, string(args[1]))
		}
		return out
	}
}

func llen(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	sh := s.shard(args[1])
	defer sh.mu.Unlock()
	switch e := sh.get(args[1]); {
	case e == nil:
		return resp.AppendInt(out, 0)
	case e.list == nil:
		return resp.AppendError(out, errWrongType)
	default:
		return resp.AppendInt(out, int64(e.list.n))
	}
}

func lrange(s *Store, _ *Session, args [][]byte, out []byte) []byte {
	start, err1 := strconv.Atoi(string(args[2]))
	stop, err2 := strconv.Atoi(string(args[3]))
	if err1 != nil || err2 != nil {
		return resp.AppendError(out, errNotInt)
	}
	sh := s.shard(args[1])
	defer sh.mu.Unlock()
	e := sh.get(args[1])
	switch {
	case e == nil:
		return resp.AppendArray(out, 0)
	case e.list == nil:
		return resp.AppendError(out, errWrongType)
	}
	n := e.list.n
	if start < 0 {
		start = max(0, n+start)
	}
	if stop < 0 {
		stop = n + stop
	}
	stop = min(stop, n-1)
	if start > stop {
		return resp.AppendArray(out, 0)
	}
	out = resp.AppendArray(out, stop-start+1)
	for i := start; i <= stop; i++ {
		out = resp.AppendBulk(out, e.list.at(i))
	}
	return out
}

func dbsize(s *Store, _ *Session, _ [][]byte, out []byte) []byte {
	return resp.AppendInt(out, int64(s.Len()))
}

func flush(s *Store, _ *Session, _ [][]byte, out []byte) []byte {
	s.flush()
	return resp.AppendSimple(out, "OK")
}

// commandCmd answers COMMAND and its subcommands with empty replies:
// redis-cli asks for COMMAND DOCS to offer hints, and does without.
func commandCmd(_ *Store, _ *Session, args [][]byte, out []byte) []byte {
	if len(args) > 1 && strings.EqualFold(string(args[1]), "count") {
		return resp.AppendInt(out, int64(len(commands)))
	}
	return resp.AppendArray(out, 0)
}

// configParams are what CONFIG GET reports: redis-benchmark asks for save
// and appendonly at start.
var configParams = [][2]string{{"save", ""}, {"appendonly", "no"}, {"databases", "1"}, {"maxmemory", "0"}}

func config(_ *Store, _ *Session, args [][]byte, out []byte) []byte {
	switch sub := strings.ToLower(string(args[1])); {
	case sub == "get" && len(args) >= 3:
		var found []string
		for _, pat := range args[2:] {
			for _, kv := range configParams {
				if ok, _ := path.Match(strings.ToLower(string(pat)), kv[0]); ok {
					found = append(found, kv[0], kv[1])
				}
			}
		}
		out = resp.AppendArray(out, len(found))
		for _, f := range found {
			out = resp.AppendBulkString(out, f)
		}
		return out
	case sub == "set" || sub == "resetstat":
		return resp.AppendSimple(out, "OK")
	}
	return resp.AppendError(out, "ERR unknown subcommand or wrong number of arguments for '"+clip(args[1])+"'")
}

func client(_ *Store, c *Session, args [][]byte, out []byte) []byte {
	switch sub := strings.ToLower(string(args[1])); {
	case sub == "setname" && len(args) == 3:
		if bytes.ContainsAny(args[2], " \r\n") {
			return resp.AppendError(out, "ERR Client names cannot contain spaces, newlines or special characters.")
		}
		c.Name = string(args[2])
		return resp.AppendSimple(out, "OK")
	case sub == "getname":
		if c.Name == "" {
			return resp.AppendNull(out)
		}
		return resp.AppendBulkString(out, c.Name)
	case sub == "id":
		return resp.AppendInt(out, c.ID)
	case sub == "setinfo" && len(args) == 4:
		return resp.AppendSimple(out, "OK")
	case sub == "info" || sub == "list":
		return resp.AppendBulkString(out, "id="+strconv.FormatInt(c.ID, 10)+" name="+c.Name+" db=0\n")
	}
	return resp.AppendError(out, "ERR unknown subcommand or wrong number of arguments for '"+clip(args[1])+"'")
}

// hello answers HELLO [2] [SETNAME name] in RESP2; RESP3 is not spoken.
func hello(s *Store, c *Session, args [][]byte, out []byte) []byte {
	if len(args) > 1 {
		if string(args[1]) != "2" {
			return resp.AppendError(out, "NOPROTO sorry, this protocol version is not supported")
		}
		for i := 2; i < len(args); i++ {
			switch opt := strings.ToUpper(string(args[i])); {
			case opt == "SETNAME" && i+1 < len(args):
				i++
				c.Name = string(args[i])
			case opt == "AUTH" && i+2 < len(args):
				return resp.AppendError(out, "WRONGPASS invalid username-password pair or user is disabled.")
			default:
				return resp.AppendError(out, errSyntax)
			}
		}
	}
	out = resp.AppendArray(out, 14)
	for _, kv := range [][2]string{{"server", "redis"}, {"version", "7.0.0"}} {
		out = resp.AppendBulkString(resp.AppendBulkString(out, kv[0]), kv[1])
	}
	out = resp.AppendInt(resp.AppendBulkString(out, "proto"), 2)
	out = resp.AppendInt(resp.AppendBulkString(out, "id"), c.ID)
	for _, kv := range [][2]string{{"mode", "standalone"}, {"role", "master"}} {
		out = resp.AppendBulkString(resp.AppendBulkString(out, kv[0]), kv[1])
	}
	return resp.AppendArray(resp.AppendBulkString(out, "modules"), 0)
}

// info reports a Redis-like INFO: enough for tools that read
// redis_version, role and the keyspace.
func info(s *Store, _ *Session, _ [][]byte, out []byte) []byte {
	b := []byte("# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nserver:gracepoll examples/kv\r\n\r\n" +
		"# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n")
	if s.Info != nil {
		b = s.Info(b)
	}
	b = append(b, "# Keyspace\r\n"...)
	if n := s.Len(); n > 0 {
		b = append(b, "db0:keys="+strconv.Itoa(n)+",expires=0,avg_ttl=0\r\n"...)
	}
	return resp.AppendBulk(out, b)
}
